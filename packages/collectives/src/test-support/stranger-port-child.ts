/**
 * A child process that owns one listening port (`startPort`), so a test can measure the memory
 * that strangers make the port's process hold, apart from the strangers' own. Arguments: the port
 * kind and the pre-auth limits as JSON. Answers one JSON line on stdout per line on stdin:
 * `reset` (start measuring), `peak` (the largest RSS growth since `reset`, in bytes, sampled every
 * 5 ms), `alive` (the port's owners still work), `close`.
 */
import { createInterface } from 'node:readline';
import type { PreAuthLimits } from '../pre-auth-guard.js';
import { type PortKind, startPort } from './stranger.js';

const [kind, limits] = process.argv.slice(2) as [PortKind, string];
const port = await startPort(kind, JSON.parse(limits) as PreAuthLimits);
let baseline = process.memoryUsage.rss();
let peak = baseline;
const sampler = setInterval(() => {
  peak = Math.max(peak, process.memoryUsage.rss());
}, 5);

function answer(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value)}\n`);
}

answer({ port: port.port, tls: port.tls, websocket: port.websocket });
for await (const line of createInterface({ input: process.stdin })) {
  if (line === 'reset') {
    baseline = process.memoryUsage.rss();
    peak = baseline;
    answer({ ok: true });
  } else if (line === 'peak') {
    answer({ bytes: Math.max(peak, process.memoryUsage.rss()) - baseline });
  } else if (line === 'alive') {
    await port.alive();
    answer({ ok: true });
  } else if (line === 'close') {
    break;
  }
}
clearInterval(sampler);
await port.close();
