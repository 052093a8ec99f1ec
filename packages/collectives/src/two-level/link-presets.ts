/** A preset's settings (the fields of `LinkSettings` it sets). */
export interface LinkPreset {
  readonly latencyMs: number;
  readonly gbitPerSecond: number;
  readonly loss?: number;
}

/**
 * [Note: link presets]
 * Named links for `WEBSHARD_LINK` (and `initProcessGroup({ link })`), for planning training across
 * the internet on one machine. Latency is one way; bandwidth is each direction of each pair of
 * ranks (the shaper gives every pair its own link: a home line shared by several ranks of one
 * house would give each a share). Figures are typical, not measured here:
 * - `datacenter`: 10 Gbit/s, 50 us (a rack's Ethernet; faster settings would measure this
 *   machine's loopback, about 1-2 GB/s, not the link).
 * - `broadband-100`: 100 Mbit/s, 20 ms (fibre or cable to a nearby region).
 * - `broadband-20`: 20 Mbit/s, 40 ms (a typical home upload and a cross-country path).
 * - `mobile`: 10 Mbit/s, 60 ms, 0.1 % packet loss (4G).
 * A preset may be followed by settings that override it: `broadband-20,loss=0.01`.
 */
export const LINK_PRESETS: Readonly<Record<string, LinkPreset>> = {
  datacenter: { latencyMs: 0.05, gbitPerSecond: 10 },
  'broadband-100': { latencyMs: 20, gbitPerSecond: 0.1 },
  'broadband-20': { latencyMs: 40, gbitPerSecond: 0.02 },
  mobile: { latencyMs: 60, gbitPerSecond: 0.01, loss: 0.001 },
};
