import { StoreServer, type TlsOptions } from '../rendezvous/store-server.js';

/** `ws://host:port` (`wss://` when `secure`), with an IPv6 host in brackets. */
export function wsUrl(host: string, port: number, secure = false): string {
  return `${secure ? 'wss' : 'ws'}://${host.includes(':') ? `[${host}]` : host}:${port}`;
}

/**
 * The rendezvous stores of an elastic world's epochs, hosted by the coordinator: each epoch's
 * group is built on a fresh store sized for it (ranks and world size are the store's join
 * check). The store of the epoch before the last is closed when a new one opens: by then every
 * live member has left that group. Node only.
 */
export class EpochStores {
  private readonly servers: StoreServer[] = [];
  private closed = false;

  constructor(
    private readonly host: string,
    private readonly token: string,
    /** Serve every store over `wss://` with the coordinator's certificate. */
    private readonly tls: TlsOptions | null = null,
  ) {}

  /** Opens the store of a new epoch of `worldSize` members; resolves with its URL. */
  async open(worldSize: number): Promise<string> {
    const server = new StoreServer({
      port: 0,
      host: this.host,
      token: this.token,
      worldSize,
      ...(this.tls === null ? {} : { tls: this.tls }),
    });
    const port = await server.listen();
    if (this.closed) {
      await server.close();
      throw new Error('the coordinator closed');
    }
    this.servers.push(server);
    while (this.servers.length > 2) void this.servers.shift()!.close();
    return wsUrl(this.host, port, this.tls !== null);
  }

  /** Stops every store. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all(this.servers.splice(0).map((server) => server.close()));
  }
}
