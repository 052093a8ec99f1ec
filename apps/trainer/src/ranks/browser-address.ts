import { formatJoinUrl } from '@webshard/collectives';

/** Loopback names: a tab on this machine only, and a secure context over plain http. */
const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost']);

/** `host` as it goes in a URL (an IPv6 address in brackets). */
function inUrl(host: string): string {
  return host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
}

/** Where the tabs of a `--browser-ranks` run go, and what the user is told about it. */
export interface BrowserAddresses {
  /** The page to open in each tab: `http(s)://host:port/#token=...`. */
  pageUrl: string;
  /** The join URL the page gives `connectBrowserRank`: `ws(s)://host:masterPort/?worldSize=...`. */
  join: string;
  /** The line that says what to open, and where from. */
  message: string;
  /** Lines for stderr: what a non-loopback address without TLS exposes. */
  warnings: string[];
}

/**
 * The addresses of a run whose tabs reach this machine at `host` (`--browser-host`): the page on
 * `pagePort`, the store on `masterPort`, over TLS (`https://`, `wss://`) when `tls`. See [Note:
 * browser tabs on other machines] in ./browser-ranks.ts.
 */
export function browserAddresses(options: {
  host: string;
  pagePort: number;
  masterPort: number;
  worldSize: number;
  tabRanks: number[];
  token: string;
  tls: boolean;
}): BrowserAddresses {
  const { host, pagePort, masterPort, worldSize, tabRanks, token, tls } = options;
  const at = inUrl(host);
  const pageUrl = `${tls ? 'https' : 'http'}://${at}:${pagePort}/#token=${token}`;
  const join = formatJoinUrl(`${tls ? 'wss' : 'ws'}://${at}:${masterPort}`, worldSize, tabRanks);
  const local = LOOPBACK.has(host);
  const k = tabRanks.length;
  const first = tabRanks[0]!;
  const ranks = k === 1 ? `rank ${first}` : `ranks ${first} to ${tabRanks.at(-1)}`;
  const where = local
    ? 'a browser on this machine'
    : `a browser on any machine that reaches ${host}`;
  const message = `browser ranks: open ${pageUrl} in ${k} tab(s) of ${where} (WebGPU or not): they join as ${ranks} of ${worldSize}`;
  const warnings: string[] = [];
  if (!local && !tls) {
    warnings.push(
      `browser ranks: --browser-host ${host} without TLS: the page, the join token and every gradient cross the network in cleartext (http://, ws://), and anyone who can reach ${host} and read that traffic can join or read the run; set WEBSHARD_TLS_CERT and WEBSHARD_TLS_KEY (PEM files; WEBSHARD_TLS_CA where the Node ranks must trust a private CA) to serve the page over https:// and every connection over wss:// (the ws transport's TLS)`,
      `browser ranks: a page from http://${at} is not a secure context, so Chromium gives it no WebGPU: those tabs train on the CPU backend (https:// with a certificate the browser trusts, or a tab on this machine at 127.0.0.1, has WebGPU)`,
    );
  }
  return { pageUrl, join, message, warnings };
}
