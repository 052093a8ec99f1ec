import { createSocket } from 'node:dgram';
import { isIPv6 } from 'node:net';

/**
 * The address of this machine's interface that routes toward `host` (the master): what the other
 * ranks can reach us at. A connected UDP socket asks the kernel for the route; nothing is sent.
 */
export function localAddressToward(host: string, port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = createSocket(isIPv6(host) ? 'udp6' : 'udp4');
    socket.once('error', (error) => {
      socket.close();
      reject(error);
    });
    socket.connect(port, host, () => {
      const { address } = socket.address();
      socket.close();
      resolve(address);
    });
  });
}
