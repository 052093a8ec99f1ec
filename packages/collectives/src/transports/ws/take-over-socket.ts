import { Socket } from 'node:net';

/** What `onread` takes: the buffer to read into next, and what was read into it. */
export interface ReadInPlace {
  buffer: () => Uint8Array;
  callback: (nread: number, buffer: Uint8Array) => boolean;
}

/** A socket's libuv handle, which `net.Socket` keeps in a field it does not document. */
interface WithHandle {
  _handle?: { readStart?: unknown; useUserBuffer?: unknown } | null;
}

/**
 * A socket reading `raw`'s connection with `onread`, or null where that cannot be done (a TLS
 * socket, a socket without its handle). `raw` must not be used afterwards; it is destroyed when
 * the new socket closes, so the server that accepted it counts the connection as gone.
 *
 * [Note: reading an accepted socket in place]
 * `onread` (Node reads into a buffer we choose, so a payload lands in the receive's destination
 * straight from the kernel) is an option of the `net.Socket` constructor only; the sockets an HTTP
 * server hands to its 'upgrade' event read into a fresh 64 KiB buffer per read, which the WebSocket
 * decoder then copies into the destination. In a ring every Node rank reads one accepted
 * connection, so that copy set the pace of a `ws` all-reduce. Node's own `new Socket({ handle })`,
 * which its cluster and child-process handle passing use, makes a second socket on the same
 * libuv handle: the constructor points the handle's reads and `useUserBuffer` at the new socket.
 * Done inside the 'upgrade' event, after the HTTP parser has let go of the handle and before the
 * next read, no byte is read by the old socket, and every byte is written through the new one.
 * The server forgot the connection's parser at the upgrade; destroying the old socket when the new
 * one closes releases its count of connections (closing a closed handle is a no-op). TLS sockets
 * read through their TLS layer and keep 'data' events.
 */
export function takeOverSocket(raw: Socket, onread: ReadInPlace): Socket | null {
  const handle = (raw as unknown as WithHandle)._handle;
  if (
    handle == null ||
    typeof handle.readStart !== 'function' ||
    typeof handle.useUserBuffer !== 'function' ||
    'encrypted' in raw
  ) {
    return null;
  }
  const socket = new Socket({ handle, onread } as ConstructorParameters<typeof Socket>[0]);
  // `raw` keeps the handle's reference, so its destroy below closes nothing the new socket needs.
  raw.removeAllListeners('data');
  socket.once('close', () => raw.destroy());
  return socket;
}
