import { networkInterfaces } from 'node:os';
import { describe, expect, it } from 'vitest';
import { browserAddresses } from './browser-address.js';
import { servePage } from './browser-job.js';
import type { TrainConfig } from '../config.js';
import { parseOptions } from '../cli/options.js';

const base = { pagePort: 8123, masterPort: 29500, worldSize: 3, tabRanks: [1, 2], token: 'abc' };

describe('browser rank addresses (--browser-host)', () => {
  it('on 127.0.0.1: the page and the join URL there, for this machine only, no warning', () => {
    const a = browserAddresses({ ...base, host: '127.0.0.1', tls: false });
    expect(a.pageUrl).toBe('http://127.0.0.1:8123/#token=abc');
    expect(a.join).toBe('ws://127.0.0.1:29500/?worldSize=3&ranks=1-2');
    expect(a.message).toBe(
      'browser ranks: open http://127.0.0.1:8123/#token=abc in 2 tab(s) of a browser on this machine (WebGPU or not): they join as ranks 1 to 2 of 3',
    );
    expect(a.warnings).toEqual([]);
  });

  it('on another address without TLS: that address everywhere, and warnings about cleartext and WebGPU', () => {
    const a = browserAddresses({ ...base, host: '192.168.1.20', tabRanks: [2], tls: false });
    expect(a.pageUrl).toBe('http://192.168.1.20:8123/#token=abc');
    expect(a.join).toBe('ws://192.168.1.20:29500/?worldSize=3&ranks=2-2');
    expect(a.message).toContain(
      'in 1 tab(s) of a browser on any machine that reaches 192.168.1.20 (WebGPU or not): they join as rank 2 of 3',
    );
    expect(a.warnings).toHaveLength(2);
    expect(a.warnings[0]).toMatch(
      /^browser ranks: --browser-host 192\.168\.1\.20 without TLS: the page, the join token and every gradient cross the network in cleartext .*set WEBSHARD_TLS_CERT and WEBSHARD_TLS_KEY/,
    );
    expect(a.warnings[1]).toContain('not a secure context, so Chromium gives it no WebGPU');
  });

  it('with TLS: https and wss, no warning; an IPv6 address in brackets', () => {
    const a = browserAddresses({ ...base, host: 'fd00::5', tls: true });
    expect(a.pageUrl).toBe('https://[fd00::5]:8123/#token=abc');
    expect(a.join).toBe('wss://[fd00::5]:29500/?worldSize=3&ranks=1-2');
    expect(a.warnings).toEqual([]);
  });

  // A machine with an address other than loopback: the page is served there, and the job it
  // serves names that address (a tab on another machine reaches both).
  const lan = Object.values(networkInterfaces())
    .flat()
    .find((i) => i !== undefined && i.family === 'IPv4' && !i.internal)?.address;
  it.skipIf(lan === undefined)('serves the page on the --browser-host address', async () => {
    const config = parseOptions(
      [
        '--strategy',
        'ddp',
        '--world-size',
        '2',
        '--transport',
        'ws',
        '--browser-ranks',
        '1',
        '--browser-host',
        lan!,
      ],
      process.cwd(),
    ) as TrainConfig;
    const join = browserAddresses({ ...base, host: lan!, tls: false }).join;
    const page = await servePage({ config, join }, null, { host: config.browserHost, port: 0 });
    try {
      const job = await (await fetch(`http://${lan}:${page.port}/job.json`)).json();
      expect(job).toMatchObject({ join: `ws://${lan}:29500/?worldSize=3&ranks=1-2` });
      // Bound to that address only: loopback does not answer.
      await expect(fetch(`http://127.0.0.1:${page.port}/job.json`)).rejects.toThrow();
    } finally {
      await page.close();
    }
  });

  it('serves every file cross-origin isolated (COOP and COEP), so the CPU matmul of a tab has threads', async () => {
    const config = parseOptions(
      ['--strategy', 'ddp', '--world-size', '2', '--transport', 'ws', '--browser-ranks', '1'],
      process.cwd(),
    ) as TrainConfig;
    const join = browserAddresses({ ...base, host: '127.0.0.1', tls: false }).join;
    const page = await servePage({ config, join }, null, { host: '127.0.0.1', port: 0 });
    try {
      for (const path of ['/', '/job.json']) {
        const response = await fetch(`http://127.0.0.1:${page.port}${path}`);
        expect(response.status).toBe(200);
        expect(response.headers.get('cross-origin-opener-policy')).toBe('same-origin');
        expect(response.headers.get('cross-origin-embedder-policy')).toBe('require-corp');
      }
    } finally {
      await page.close();
    }
  });
});
