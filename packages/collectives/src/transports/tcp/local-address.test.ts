import { networkInterfaces } from 'node:os';
import { describe, expect, it } from 'vitest';
import { localAddressToward } from './local-address.js';

describe('localAddressToward', () => {
  it('answers loopback for a loopback master', async () => {
    expect(await localAddressToward('127.0.0.1', 29500)).toBe('127.0.0.1');
  });

  it("answers one of this machine's addresses for another host", async () => {
    const entries = Object.values(networkInterfaces()).flat();
    const external = entries.find((e) => e !== undefined && !e.internal && e.family === 'IPv4');
    expect(external, 'this machine has no non-loopback IPv4 address').toBeDefined();
    const own = entries.map((entry) => entry?.address);
    expect(own).toContain(await localAddressToward(external!.address, 29500));
  });
});
