import { readFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { BrowserJob } from './browser-page.js';
import { rankPageBundle } from './page-bundle.js';

const PAGE = `<!doctype html>
<meta charset="utf-8">
<title>webshard-train: browser rank</title>
<h1>webshard-train</h1>
<p id="status">loading...</p>
<script type="module" src="/rank.js"></script>
`;

/** The page server of a run with browser ranks: where it listens; `close` stops it. */
export interface PageServer {
  /** `http://127.0.0.1:port/#token=...`: the address a user opens in each tab. */
  url: string;
  close(): Promise<void>;
}

/**
 * Serves the page that adds a tab as a rank, on 127.0.0.1 (a secure context, as WebGPU needs, and
 * reachable only from this machine): `/` (the page), `/rank.js` (./browser-page.ts bundled),
 * `/job.json` (the run's flags and join URL) and `/data` (the run's data file; `dataPath` null for
 * the MLP's synthetic data). Nothing else, and the join token only in the URL's fragment, which a
 * browser keeps to itself.
 */
export async function servePage(
  job: BrowserJob,
  dataPath: string | null,
  token: string,
  port: number,
): Promise<PageServer> {
  const files: Record<string, { type: string; body: () => Promise<string | Uint8Array> }> = {
    '/': { type: 'text/html; charset=utf-8', body: async () => PAGE },
    '/rank.js': { type: 'text/javascript', body: rankPageBundle },
    '/job.json': { type: 'application/json', body: async () => JSON.stringify(job) },
  };
  if (dataPath !== null) {
    files['/data'] = { type: 'application/octet-stream', body: () => readFile(dataPath) };
  }
  // Bundled once, when first asked for (esbuild from source takes a second or two).
  const cache = new Map<string, Promise<string | Uint8Array>>();
  const server: Server = createServer((request, response) => {
    const path = new URL(request.url ?? '/', 'http://127.0.0.1').pathname;
    const file = files[path];
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
      .then((body) => response.writeHead(200, { 'content-type': file.type }).end(body))
      .catch((error: Error) => response.writeHead(500).end(error.message));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  const bound = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${bound}/#token=${token}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
