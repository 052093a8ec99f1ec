// Loaded with `node --import` (through NODE_OPTIONS, so the CLI's child loads it too) into a
// member that must listen on nothing (`--no-listen`): any listening socket it opens, TCP or a
// pipe, through `net`, `http`, `https` or `ws`, throws here and is written to stderr, so the test
// sees the member fail instead of a socket opened quietly.
import { Server } from 'node:net';

Server.prototype.listen = function guarded(...args) {
  const message = `[listen-guard] pid ${process.pid} opened a listening socket (${JSON.stringify(args[0] ?? null)})`;
  process.stderr.write(`${message}\n`);
  throw new Error(message);
};
