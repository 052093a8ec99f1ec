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

/** Who this member is, for `resume` on a new connection after the old one broke. */
export interface ResumeAs {
  readonly token: string;
  readonly name: string;
  readonly id: number;
  readonly epoch: number;
  readonly members: readonly number[];
  /** Sync points passed in that epoch. */
  readonly round: number;
}

/** One WebSocket to `url`, or the reason it could not open. */
function openSocket(url: string, Ctor: WebSocketConstructor): Promise<WebSocketLike | string> {
  return new Promise<WebSocketLike | string>((resolve) => {
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
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A member's connection to the elastic coordinator (browser-safe): sends member messages and
 * hands the coordinator's answers out in order. It answers the coordinator's beats, and once the
 * member is in an epoch (`resumeAs` set) it outlives its socket: a connection that closes, or a
 * coordinator silent for the member timeout, is replaced, with backoff, for up to
 * `coordinatorTimeoutMs` ([Note: liveness in an elastic world]). Until then `next()` waits and
 * `reconnecting` is true; after it, or once the coordinator refused this member, every pending
 * and later `next()` rejects with an `ElasticError` saying why (code `E_COORDINATOR_LOST`, or
 * `E_DROPPED`).
 */
export class CoordinatorLink {
  private readonly inbox: CoordinatorMessage[] = [];
  private readonly takers: {
    resolve: (message: CoordinatorMessage) => void;
    reject: (reason: string) => void;
    /** Set by `answerUnlessBroken`: the connection broke before the answer came. */
    broke?: () => void;
  }[] = [];
  private closedBecause: { reason: string; code: string } | null = null;
  private socket: WebSocketLike;
  private lastHeard = Date.now();
  private watchdog: ReturnType<typeof setInterval> | null = null;
  /** The last `sync` sent that is not answered yet: sent again on a new connection. */
  private unanswered: MemberMessage | null = null;
  private leaving = false;
  /** Whether the connection is being replaced (the coordinator is away). */
  reconnecting = false;
  /** The coordinator's id for this member, once welcomed. */
  member: number | undefined;
  /** The coordinator's member timeout, once welcomed. */
  memberTimeoutMs = 60_000;
  /** Set once the member is in an epoch: what `resume` says on a new connection. */
  resumeAs: ResumeAs | undefined;
  /** Told when the coordinator drops members of the current epoch (abort the group now). */
  onDropped: ((message: Extract<CoordinatorMessage, { op: 'dropped' }>) => void) | undefined;
  /** Told once the coordinator is lost for good (`coordinatorTimeoutMs`). */
  onLost: ((error: ElasticError) => void) | undefined;

  private constructor(
    socket: WebSocketLike,
    readonly url: string,
    private readonly Ctor: WebSocketConstructor,
    /** How long the member keeps trying to reach a coordinator that went away. */
    readonly coordinatorTimeoutMs: number,
  ) {
    this.socket = socket;
    this.attach(socket);
  }

  /** Opens a connection to the coordinator, retrying until `timeoutMs` (it may start later). */
  static async open(
    url: string,
    timeoutMs: number,
    WebSocket?: WebSocketConstructor,
    coordinatorTimeoutMs = 300_000,
  ): Promise<CoordinatorLink> {
    const Ctor = WebSocket ?? (await defaultWebSocket());
    const deadline = Date.now() + timeoutMs;
    let delay = 20;
    for (;;) {
      const opened = await openSocket(url, Ctor);
      if (typeof opened !== 'string') {
        return new CoordinatorLink(opened, url, Ctor, coordinatorTimeoutMs);
      }
      if (Date.now() + delay > deadline) {
        throw new ElasticError(
          'join',
          `could not reach the coordinator at ${url} within ${timeoutMs} ms: ${opened}`,
          { code: 'E_TIMEOUT' },
        );
      }
      await sleep(delay);
      delay = Math.min(delay * 2, 500);
    }
  }

  private attach(socket: WebSocketLike): void {
    socket.onmessage = (event) => {
      if (socket !== this.socket) return;
      const text = messageText(event.data);
      const message = text === undefined ? undefined : parseCoordinatorMessage(text);
      if (message === undefined) return;
      this.lastHeard = Date.now();
      if (message.op === 'beat') {
        if (socket.readyState === OPEN) socket.send(JSON.stringify({ op: 'heartbeat' }));
        return;
      }
      if (message.op === 'dropped') {
        this.onDropped?.(message);
        return;
      }
      if (message.op === 'welcome' && message.memberTimeoutMs !== undefined) {
        this.memberTimeoutMs = message.memberTimeoutMs;
        this.watch(message.heartbeatMs ?? message.memberTimeoutMs / 6);
      }
      if (message.op === 'refused' && message.code === 'E_DROPPED') {
        this.shut(`dropped by the coordinator: ${message.message}`, 'E_DROPPED');
        return;
      }
      if (message.op !== 'welcome') this.unanswered = null;
      const taker = this.takers.shift();
      if (taker !== undefined) taker.resolve(message);
      else this.inbox.push(message);
    };
    socket.onclose = (event) => {
      if (socket !== this.socket) return;
      this.broke(
        `the coordinator at ${this.url} closed the connection (${event.code} ${event.reason})`,
      );
    };
    socket.onerror = () => {};
  }

  /** Checks every `intervalMs` that the coordinator was heard within the member timeout. */
  private watch(intervalMs: number): void {
    if (this.watchdog !== null) return;
    this.watchdog = setInterval(() => {
      const silentMs = Date.now() - this.lastHeard;
      if (!this.reconnecting && silentMs > this.memberTimeoutMs) {
        this.broke(`the coordinator at ${this.url} sent nothing for ${Math.round(silentMs)} ms`);
      }
    }, intervalMs);
    (this.watchdog as { unref?: () => void }).unref?.();
  }

  /** The connection is gone: replace it when the member is in an epoch, else give up. */
  private broke(reason: string): void {
    if (this.closedBecause !== null || this.reconnecting) return;
    if (this.leaving || this.resumeAs === undefined) {
      this.shut(reason, 'E_COORDINATOR_LOST');
      return;
    }
    // A sync waiting for its answer gives up: the coordinator may never have sent it.
    for (const taker of this.takers.filter((t) => t.broke !== undefined)) {
      this.takers.splice(this.takers.indexOf(taker), 1);
      this.unanswered = null;
      taker.broke!();
    }
    const old = this.socket;
    old.onmessage = old.onclose = null;
    try {
      old.close();
    } catch {
      // Already closed.
    }
    void this.reconnect(reason);
  }

  private async reconnect(reason: string): Promise<void> {
    this.reconnecting = true;
    const since = Date.now();
    let delay = 100;
    while (this.closedBecause === null && !this.leaving) {
      const opened = await openSocket(this.url, this.Ctor);
      if (typeof opened !== 'string') {
        this.socket = opened;
        this.attach(opened);
        this.lastHeard = Date.now();
        opened.send(JSON.stringify({ op: 'resume', ...this.resumeAs! }));
        const welcome = await this.firstAnswer(opened);
        if (welcome === 'welcome') {
          this.reconnecting = false;
          if (this.unanswered !== null) opened.send(JSON.stringify(this.unanswered));
          return;
        }
        if (this.closedBecause !== null) return;
      }
      if (Date.now() - since + delay > this.coordinatorTimeoutMs) {
        const seconds = Math.round(this.coordinatorTimeoutMs / 1000);
        const error = this.shut(
          `no coordinator at ${this.url} for ${seconds} s (coordinatorTimeoutMs; ${reason})`,
          'E_COORDINATOR_LOST',
        );
        this.onLost?.(error);
        return;
      }
      await sleep(delay);
      delay = Math.min(delay * 2, 1000);
    }
  }

  /** Waits for `welcome` on a resumed connection: `'welcome'`, or `'gone'` when it closed. */
  private firstAnswer(socket: WebSocketLike): Promise<'welcome' | 'gone'> {
    return new Promise((resolve) => {
      const onmessage = socket.onmessage;
      socket.onmessage = (event) => {
        const text = messageText(event.data);
        const message = text === undefined ? undefined : parseCoordinatorMessage(text);
        socket.onmessage = onmessage;
        if (message?.op === 'welcome') {
          this.lastHeard = Date.now();
          resolve('welcome');
        } else {
          onmessage?.call(socket, event);
          resolve('gone');
        }
      };
      socket.onclose = () => resolve('gone');
    });
  }

  send(message: MemberMessage): void {
    if (message.op === 'sync') this.unanswered = message;
    if (this.closedBecause === null && !this.reconnecting && this.socket.readyState !== OPEN) {
      // The socket closed (the coordinator died) but its close event is still queued behind this
      // send: the connection broke all the same, and a member in an epoch replaces it rather than
      // failing its sync point.
      this.broke(`the coordinator at ${this.url} closed the connection (not open)`);
    }
    if (this.reconnecting && this.closedBecause === null) return;
    if (this.closedBecause !== null || this.socket.readyState !== OPEN) {
      throw this.error(message.op, this.closedBecause?.reason ?? 'the connection is not open');
    }
    this.socket.send(JSON.stringify(message));
  }

  /** The coordinator's next message; rejects once the connection is gone for good. */
  next(op: string): Promise<CoordinatorMessage> {
    const queued = this.inbox.shift();
    if (queued !== undefined) return Promise.resolve(queued);
    if (this.closedBecause !== null)
      return Promise.reject(this.error(op, this.closedBecause.reason));
    return new Promise((resolve, reject) => {
      this.takers.push({ resolve, reject: (reason) => reject(this.error(op, reason)) });
    });
  }

  /**
   * The answer to the sync just sent, or null when the connection breaks first (or is broken
   * already): then the sync is not sent again on the next connection.
   */
  answerUnlessBroken(op: string): Promise<CoordinatorMessage | null> {
    const queued = this.inbox.shift();
    if (queued !== undefined) return Promise.resolve(queued);
    if (this.closedBecause !== null)
      return Promise.reject(this.error(op, this.closedBecause.reason));
    if (this.reconnecting) {
      this.unanswered = null;
      return Promise.resolve(null);
    }
    return new Promise((resolve, reject) => {
      this.takers.push({
        resolve,
        reject: (reason) => reject(this.error(op, reason)),
        broke: () => resolve(null),
      });
    });
  }

  /** Puts `message` back in front of the next `next()`. */
  pushBack(message: CoordinatorMessage): void {
    this.inbox.unshift(message);
  }

  /** Why the link is gone for good (`E_DROPPED`, `E_COORDINATOR_LOST`), or null while it lives. */
  get closedCode(): string | null {
    return this.closedBecause?.code ?? null;
  }

  /** Says goodbye (the coordinator then counts this member as left) and closes. */
  close(): void {
    if (this.closedBecause !== null) return;
    this.leaving = true;
    try {
      if (!this.reconnecting) this.send({ op: 'leave' });
    } catch {
      // Already gone: closing is all that is left.
    }
    this.socket.close(1000, 'leave');
    this.shut('this member left', 'E_COORDINATOR_LOST');
  }

  private error(op: string, detail: string): ElasticError {
    return new ElasticError(op, detail, {
      code: this.closedBecause?.code ?? 'E_COORDINATOR_LOST',
      ...(this.member !== undefined ? { member: this.member } : {}),
    });
  }

  private shut(reason: string, code: string): ElasticError {
    if (this.closedBecause === null) {
      this.closedBecause = { reason, code };
      if (this.watchdog !== null) clearInterval(this.watchdog);
      this.reconnecting = false;
    }
    for (const taker of this.takers.splice(0)) taker.reject(this.closedBecause.reason);
    return this.error('link', this.closedBecause.reason);
  }
}
