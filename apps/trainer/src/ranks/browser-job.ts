import { readFile } from 'node:fs/promises';
import { extname, join, normalize, sep } from 'node:path';
import { createServer, type Server } from 'node:http';
import { createServer as createTlsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { playgroundDir } from '../playground-page.js';
import type { BrowserJob } from './browser-rank.js';
import { rankPageBundle } from './page-bundle.js';

const PAGE = `<!doctype html>
<meta charset="utf-8">
<title>webshard-train: browser rank</title>
<h1>webshard-train</h1>
<p id="status">loading...</p>
<p id="asleep"></p>
<script type="module" src="/rank.js"></script>
`;

/** The page server of a run with browser ranks: the port it listens on; `close` stops it. */
export interface PageServer {
  port: number;
  close(): Promise<void>;
}

/** Where the page is served: `host` and `port` (0: a free one), over https with `tls`. */
export interface PageListen {
  host: string;
  port: number;
  tls?: { cert: Buffer; key: Buffer };
}

/**
 * Sent with every file, so that the page is cross-origin isolated where it is a secure context:
 * it then has `SharedArrayBuffer`, and the tab's CPU backend runs its matmul on Web Workers
 * ([Note: matmul threads] in tensor-core; same bits as one thread, so ranks still agree). The
 * page loads only its own origin's files, and its WebSockets are not subresources COEP governs.
 */
const ISOLATED = {
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-embedder-policy': 'require-corp',
};

/** Content types of the files a playground build holds. */
const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript',
  '.css': 'text/css',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.wasm': 'application/wasm',
  '.json': 'application/json',
};

/**
 * Serves the page that adds a tab as a rank, on `listen.host` (127.0.0.1 by default: a secure
 * context, as WebGPU needs, and reachable only from this machine; see [Note: browser tabs on other
 * machines] in ./browser-ranks.ts for another address): `/` (the page: the playground's build in
 * join mode where it is built, see ../playground-page.ts, else a minimal page), its files,
 * `/rank.js` (./browser-page.ts bundled), `/job.json` (the run's flags and join URL) and `/data`
 * (the run's data file; `dataPath` null for the MLP's synthetic data). Nothing else, and the join
 * token is never served: the user's URL carries it in its fragment, which a browser keeps to
 * itself.
 */
export async function servePage(
  job: BrowserJob,
  dataPath: string | null,
  listen: PageListen,
  pageDir: string | null = playgroundDir(),
): Promise<PageServer> {
  const files: Record<string, { type: string; body: () => Promise<string | Uint8Array> }> = {
    '/': {
      type: 'text/html; charset=utf-8',
      body: async () => (pageDir === null ? PAGE : readFile(join(pageDir, 'index.html'))),
    },
    '/rank.js': { type: 'text/javascript', body: rankPageBundle },
    '/job.json': { type: 'application/json', body: async () => JSON.stringify(job) },
  };
  if (dataPath !== null) {
    files['/data'] = { type: 'application/octet-stream', body: () => readFile(dataPath) };
  }
  // Bundled once, when first asked for (esbuild from source takes a second or two).
  const cache = new Map<string, Promise<string | Uint8Array>>();
  const handler: Parameters<typeof createServer>[1] = (request, response) => {
    const path = new URL(request.url ?? '/', 'http://127.0.0.1').pathname;
    const file = files[path] ?? pageFile(pageDir, path);
    if (path === '/favicon.ico') {
      response.writeHead(204).end();
      return;
    }
    if (request.method !== 'GET' || file === undefined) {
      response.writeHead(404).end();
      return;
    }
    if (!cache.has(path)) cache.set(path, file.body());
    cache
      .get(path)!
      .then((body) => response.writeHead(200, { ...ISOLATED, 'content-type': file.type }).end(body))
      .catch((error: NodeJS.ErrnoException) =>
        response.writeHead(error.code === 'ENOENT' ? 404 : 500).end(error.message),
      );
  };
  const server: Server =
    listen.tls === undefined
      ? createServer(handler)
      : createTlsServer({ cert: listen.tls.cert, key: listen.tls.key }, handler);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(listen.port, listen.host, () => resolve());
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** A file of the page's build under `pageDir` (none outside it, and only known types). */
function pageFile(
  pageDir: string | null,
  path: string,
): { type: string; body: () => Promise<Uint8Array> } | undefined {
  if (pageDir === null) return undefined;
  const root = normalize(pageDir + sep);
  const file = normalize(join(root, decodeURIComponent(path)));
  const type = TYPES[extname(file)];
  if (!file.startsWith(root) || type === undefined) return undefined;
  return { type, body: () => readFile(file) };
}
