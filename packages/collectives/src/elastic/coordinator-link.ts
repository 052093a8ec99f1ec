import {
  defaultWebSocket,
  type WebSocketConstructor,
  type WebSocketLike,
} from '../rendezvous/store-client.js';
import { ElasticError } from './errors.js';
import {
  type CoordinatorMessage,
  type MemberMessage,
  parseCoordinatorMessage,
} from './protocol.js';

const OPEN = 1;

function messageText(data: unknown): string | undefined {
  if (typeof data === 'string') return data;
  if (data instanceof ArrayBuffer) return new TextDecoder().decode(data);
  if (ArrayBuffer.isView(data)) return new TextDecoder().decode(data);
  return undefined;
}

/**
 * A member's connection to the elastic coordinator (browser-safe): sends member messages and
 * hands the coordinator's answers out in order. Once the socket closes, every pending and later
 * `next()` rejects with an `ElasticError` saying why.
 */
export class CoordinatorLink {
  private readonly inbox: CoordinatorMessage[] = [];
  private readonly takers: {
    resolve: (message: CoordinatorMessage) => void;
    reject: (error: ElasticError) => void;
  }[] = [];
  private closedBecause: string | null = null;
  /** The coordinator's id for this member, once welcomed. */
  member: number | undefined;

  private constructor(
    private readonly socket: WebSocketLike,
    readonly url: string,
  ) {
    socket.onmessage = (event) => {
      const text = messageText(event.data);
      const message = text === undefined ? undefined : parseCoordinatorMessage(text);
      if (message === undefined) return;
      const taker = this.takers.shift();
      if (taker !== undefined) taker.resolve(message);
      else this.inbox.push(message);
    };
    socket.onclose = (event) =>
      this.shut(`the coordinator at ${url} closed the connection (${event.code} ${event.reason})`);
    socket.onerror = () => {};
  }

  /** Opens a connection to the coordinator, retrying until `timeoutMs` (it may start later). */
  static async open(
    url: string,
    timeoutMs: number,
    WebSocket?: WebSocketConstructor,
  ): Promise<CoordinatorLink> {
    const Ctor = WebSocket ?? (await defaultWebSocket());
    const deadline = Date.now() + timeoutMs;
    let delay = 20;
    for (;;) {
      const opened = await new Promise<WebSocketLike | string>((resolve) => {
        let socket: WebSocketLike;
        try {
          socket = new Ctor(url);
        } catch (error) {
          resolve(String((error as Error).message ?? error));
          return;
        }
        socket.binaryType = 'arraybuffer';
        socket.onopen = () => resolve(socket);
        socket.onerror = (event) =>
          resolve((event as { message?: string }).message ?? 'connection error');
        socket.onclose = (event) => resolve(`closed (${event.code})`);
      });
      if (typeof opened !== 'string') return new CoordinatorLink(opened, url);
      if (Date.now() + delay > deadline) {
        throw new ElasticError(
          'join',
          `could not reach the coordinator at ${url} within ${timeoutMs} ms: ${opened}`,
          { code: 'E_TIMEOUT' },
        );
      }
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, 500);
    }
  }

  send(message: MemberMessage): void {
    if (this.closedBecause !== null || this.socket.readyState !== OPEN) {
      throw this.error('send', this.closedBecause ?? 'the connection is not open');
    }
    this.socket.send(JSON.stringify(message));
  }

  /** The coordinator's next message; rejects once the connection is gone. */
  next(op: string): Promise<CoordinatorMessage> {
    const queued = this.inbox.shift();
    if (queued !== undefined) return Promise.resolve(queued);
    if (this.closedBecause !== null) return Promise.reject(this.error(op, this.closedBecause));
    return new Promise((resolve, reject) => {
      this.takers.push({ resolve, reject: (error) => reject(this.error(op, error.message)) });
    });
  }

  /** Says goodbye (the coordinator then counts this member as left) and closes. */
  close(): void {
    if (this.closedBecause !== null) return;
    try {
      this.send({ op: 'leave' });
    } catch {
      // Already gone: closing is all that is left.
    }
    this.socket.close(1000, 'leave');
    this.shut('this member left');
  }

  private error(op: string, detail: string): ElasticError {
    return new ElasticError(op, detail, {
      code: 'E_COORDINATOR_LOST',
      ...(this.member !== undefined ? { member: this.member } : {}),
    });
  }

  private shut(reason: string): void {
    if (this.closedBecause !== null) return;
    this.closedBecause = reason;
    for (const taker of this.takers.splice(0)) taker.reject(new ElasticError('link', reason));
  }
}
