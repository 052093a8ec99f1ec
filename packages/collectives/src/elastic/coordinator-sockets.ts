import { createHash, timingSafeEqual } from 'node:crypto';
import type { WebSocket } from 'ws';
import { type CoordinatorMessage, type MemberMessage, parseMemberMessage } from './protocol.js';

type Resume = Extract<MemberMessage, { op: 'resume' }>;

/** What the coordinator does with one connection's messages ([Note: the elastic protocol]). */
export interface MemberHandlers {
  /** Why no member is taken any more (the job failed), or null. */
  refusal(): string | null;
  /** A `join` with the right token: the coordinator welcomes a new member. */
  join(name: string): boolean;
  /** A `resume` with the right token: true when the member is taken back. */
  resume(message: Resume): boolean;
  /** Any later message of a member taken. */
  message(message: Exclude<MemberMessage, { op: 'join' } | Resume>): void;
  /** The connection closed. */
  closed(): void;
}

const digest = (text: string) => createHash('sha256').update(text, 'utf8').digest();

/** Sends `message` when the socket is open (a closing one drops it). */
export function sendTo(socket: WebSocket, message: CoordinatorMessage): void {
  if (socket.readyState === socket.OPEN) socket.send(JSON.stringify(message));
}

/** Sends `refused` (with `code`, when given) and closes; a frozen peer's socket goes after 1 s. */
export function refuseSocket(socket: WebSocket, message: string, code?: string): void {
  sendTo(socket, { op: 'refused', message, ...(code === undefined ? {} : { code }) });
  socket.close(4001, 'refused');
  // A frozen peer never answers the close handshake.
  setTimeout(() => socket.terminate(), 1000).unref?.();
}

/**
 * One member's connection: its first message must be `join` or `resume` with the job's token
 * within `helloTimeoutMs`; what follows goes to `handlers.message`. Malformed messages end it.
 */
export function acceptMember(
  socket: WebSocket,
  options: { helloTimeoutMs: number; token: string },
  handlers: MemberHandlers,
): void {
  let taken = false;
  const hello = setTimeout(() => socket.terminate(), options.helloTimeoutMs);
  socket.on('error', () => {});
  socket.on('close', () => {
    clearTimeout(hello);
    handlers.closed();
  });
  socket.on('message', (data, isBinary) => {
    const message = isBinary ? 'binary message' : parseMemberMessage(data.toString());
    if (typeof message === 'string') return refuseSocket(socket, message);
    if (!taken) {
      if (message.op !== 'join' && message.op !== 'resume') {
        return refuseSocket(socket, 'the first message must be join or resume');
      }
      if (!timingSafeEqual(digest(message.token), digest(options.token))) {
        return refuseSocket(socket, message.token === '' ? 'no join token given' : 'wrong token');
      }
      const refusal = handlers.refusal();
      if (refusal !== null) return refuseSocket(socket, refusal);
      clearTimeout(hello);
      taken = message.op === 'join' ? handlers.join(message.name) : handlers.resume(message);
      return;
    }
    if (message.op === 'join' || message.op === 'resume') {
      return refuseSocket(socket, 'already joined');
    }
    handlers.message(message);
  });
}
