import type { TlsPaths, TrainConfig } from '../config.js';
import { UsageError } from '../errors.js';

/*
 * [Note: an elastic job over the internet]
 * Two things stand between an elastic job on loopback and one whose members and tabs are spread
 * over home lines: clear text and NATs.
 *
 * TLS. `--tls-cert FILE --tls-key FILE` on `--elastic-coordinator` serve the tab page over https,
 * and the coordinator and every epoch's rendezvous store over wss ([Note: an elastic world over
 * TLS] in collectives); the URL it prints is `wss://`, so the join token (in a member's first
 * message, and in the page URL's fragment, which a browser never sends) crosses the network only
 * inside TLS, and a tab off loopback is a secure context (WebGPU, `crypto.subtle`). A member joins
 * `wss://` over ws only (tcp has no TLS and is refused), trusts `--tls-ca` (a private or
 * self-signed certificate; else Node's CAs) and, since tabs from an https page may only dial
 * `wss://`, serves its listener with its own `--tls-cert`/`--tls-key`, or listens on nothing.
 * The files are read and checked before anything listens (../ranks/tls-files.ts).
 *
 * Members behind a NAT. `--no-listen` opens no listening socket: the member dials every member
 * that listens, and its traffic with another that does not (a tab, or a second NATed member) goes
 * through the lowest-ranked member that listens, which passes the frames on unchanged ([Note: ws
 * connections] in collectives), so the numbers are those of a world where everyone listens, bit
 * for bit. What it costs the relay, per op: every byte of every relayed pair's frames twice (in
 * from the sender, out to the receiver) plus a 36-byte relay header per frame, and the sender one
 * copy of each frame. Above 256 KiB an all-reduce of N bytes runs the ring, which sends
 * 2(W-1)/W N bytes along each ring edge, so each relayed edge adds that much to the relay's
 * download and its upload: at W = 3 with two NATed members next to each other, the relay's own
 * 4/3 N each way doubles to 8/3 N. Smaller messages go by direct exchange, where every pair trades
 * its data, so the relay forwards each NATed pair's whole exchange; at W = 3 that too doubles the
 * relay's upload. Counted on the sockets (collectives' ws-relay-cost.test.ts): 2.000x for 4 MiB,
 * 2.001x for 64 KiB, the NATed members' own bytes up by under 0.1 %. A diloco int8 sync is N = a
 * quarter of the f32 parameters (and a scale per 256), once per `--inner-steps`. Hivemind's
 * `client_mode` peers solve the same problem another way: they own no part of the average, they
 * send their whole tensor to the peers that aggregate and take the result back, so nobody forwards
 * bytes but the aggregators reduce more. The relay here keeps every algorithm and its numbers as
 * they are, at the cost of one member's bandwidth. The tcp transport has no relay (a member over
 * tcp must listen); the same `relay`/`relayed` frames would carry over, since tcp shares the
 * framed transport.
 */

/** The flags of an elastic world over the internet ([Note: an elastic job over the internet]). */
export const TLS_OPTIONS = {
  'tls-cert': { type: 'string' },
  'tls-key': { type: 'string' },
  'tls-ca': { type: 'string' },
  'no-listen': { type: 'boolean' },
} as const;

/**
 * `--tls-cert FILE --tls-key FILE` (serve `https`/`wss`), `--tls-ca FILE` (trust a private CA)
 * and `--no-listen` (a member behind a NAT), checked against the rest of `config` (its elastic
 * fields already set): what they cannot mean is refused by name before anything starts. The
 * files are read when the job starts (../ranks/tls-files.ts), so a bad path names the file there.
 */
export function tlsOptions(
  v: Record<string, string | boolean | undefined>,
  config: TrainConfig,
): Pick<TrainConfig, 'tls' | 'noListen' | 'transport'> {
  const cert = (v['tls-cert'] as string | undefined) ?? null;
  const key = (v['tls-key'] as string | undefined) ?? null;
  const ca = (v['tls-ca'] as string | undefined) ?? null;
  const noListen = v['no-listen'] === true;
  const given = cert !== null || key !== null || ca !== null;
  const coordinator = Boolean(config.elasticCoordinator);
  const member = typeof config.elastic === 'string';
  if ((cert === null) !== (key === null)) {
    // Names the one missing.
    throw new UsageError('--tls-cert and --tls-key go together', {
      option: cert === null ? '--tls-cert' : '--tls-key',
    });
  }
  if (given && !coordinator && !member) {
    const option = cert !== null ? '--tls-cert' : '--tls-ca';
    throw new UsageError(
      `${option} applies to --elastic-coordinator and --elastic (for --browser-ranks, set WEBSHARD_TLS_CERT and WEBSHARD_TLS_KEY: its launched ranks read them)`,
      { option },
    );
  }
  if (coordinator && ca !== null) {
    throw new UsageError('--tls-ca applies to --elastic: the coordinator dials nobody', {
      option: '--tls-ca',
    });
  }
  if (noListen && !member) {
    throw new UsageError('--no-listen applies to --elastic (a member behind a NAT)', {
      option: '--no-listen',
    });
  }
  let transport = config.transport;
  if (member) {
    const secure = config.elastic!.startsWith('wss://');
    if (given && !secure) {
      throw new UsageError(
        `--elastic ${config.elastic} with TLS flags: the coordinator's URL must be wss://, or the join token crosses the network in the clear`,
        { option: '--elastic' },
      );
    }
    // A member of a TLS world, or one that listens on nothing, sends its data over ws: it has TLS
    // and its relay; tcp has neither.
    const needsWs = secure || noListen;
    if (needsWs && v.transport === undefined) transport = 'ws';
    if (needsWs && transport !== 'ws') {
      const why = secure
        ? "the tcp transport has no TLS: its hello would carry the join token in the clear (the coordinator's URL is wss://)"
        : 'a member that listens on nothing is reached through a member that listens, which only ws relays';
      throw new UsageError(`--transport ${transport} with --elastic: ${why}; use --transport ws`, {
        option: '--transport',
      });
    }
    if (secure && !noListen && cert === null) {
      throw new UsageError(
        `--elastic ${config.elastic}: this member listens for the others (tabs dial it from https pages), so it serves wss:// and needs --tls-cert and --tls-key; or give --no-listen`,
        { option: '--tls-cert' },
      );
    }
  }
  const tls: TlsPaths | null = given ? { cert, key, ca } : null;
  return { tls, noListen, transport };
}
