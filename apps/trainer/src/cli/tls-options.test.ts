import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { makeTestCertificate } from '@webshard/collectives/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TrainConfig } from '../config.js';
import { UsageError } from '../errors.js';
import { readTlsFiles } from '../ranks/tls-files.js';
import { runMain } from '../test-support/cli.js';
import { parseOptions } from './options.js';

const parse = (...argv: string[]) => parseOptions(argv, '/home/user/work') as TrainConfig;
const WSS = 'wss://train.example.org:29400';

function usageOf(fn: () => unknown): [string, string | undefined] {
  try {
    fn();
  } catch (error) {
    expect(UsageError.isInstance(error)).toBe(true);
    return [(error as UsageError).message, (error as UsageError).option];
  }
  throw new Error('no UsageError');
}

describe('the TLS and --no-listen flags', () => {
  it('a coordinator takes --tls-cert and --tls-key; a wss:// member trains over ws by default', () => {
    expect(
      parse('--elastic-coordinator', '0', '--tls-cert', 'c.pem', '--tls-key', 'k.pem').tls,
    ).toEqual({ cert: 'c.pem', key: 'k.pem', ca: null });
    const member = parse(
      ...['--strategy', 'ddp', '--elastic', WSS, '--tls-cert', 'c.pem', '--tls-key', 'k.pem'],
    );
    expect(member).toMatchObject({ transport: 'ws', noListen: false });
    const natted = parse(
      '--strategy',
      'ddp',
      '--elastic',
      WSS,
      '--no-listen',
      '--tls-ca',
      'ca.pem',
    );
    expect(natted).toMatchObject({ transport: 'ws', noListen: true });
    expect(natted.tls).toEqual({ cert: null, key: null, ca: 'ca.pem' });
    // Without TLS, --no-listen alone picks ws too (only ws relays).
    expect(parse('--strategy', 'ddp', '--elastic', 'ws://h:1', '--no-listen').transport).toBe('ws');
  });

  it('refuses what the flags cannot mean, naming the flag', () => {
    const ddp = ['--strategy', 'ddp'];
    expect(usageOf(() => parse('--elastic-coordinator', '0', '--tls-cert', 'c.pem'))).toEqual([
      '--tls-cert and --tls-key go together',
      '--tls-key',
    ]);
    expect(usageOf(() => parse(...ddp, '--world-size', '2', '--tls-ca', 'ca.pem'))).toEqual([
      '--tls-ca applies to --elastic-coordinator and --elastic (for --browser-ranks, set WEBSHARD_TLS_CERT and WEBSHARD_TLS_KEY: its launched ranks read them)',
      '--tls-ca',
    ]);
    expect(usageOf(() => parse('--elastic-coordinator', '0', '--tls-ca', 'ca.pem'))).toEqual([
      '--tls-ca applies to --elastic: the coordinator dials nobody',
      '--tls-ca',
    ]);
    expect(usageOf(() => parse('--elastic-coordinator', '0', '--no-listen'))).toEqual([
      '--no-listen applies to --elastic (a member behind a NAT)',
      '--no-listen',
    ]);
    expect(usageOf(() => parse(...ddp, '--elastic', 'ws://h:1', '--tls-ca', 'ca.pem'))).toEqual([
      "--elastic ws://h:1 with TLS flags: the coordinator's URL must be wss://, or the join token crosses the network in the clear",
      '--elastic',
    ]);
    expect(
      usageOf(() => parse(...ddp, '--elastic', WSS, '--no-listen', '--transport', 'tcp')),
    ).toEqual([
      "--transport tcp with --elastic: the tcp transport has no TLS: its hello would carry the join token in the clear (the coordinator's URL is wss://); use --transport ws",
      '--transport',
    ]);
    expect(
      usageOf(() => parse(...ddp, '--elastic', 'ws://h:1', '--no-listen', '--transport', 'tcp')),
    ).toEqual([
      '--transport tcp with --elastic: a member that listens on nothing is reached through a member that listens, which only ws relays; use --transport ws',
      '--transport',
    ]);
    expect(usageOf(() => parse(...ddp, '--elastic', WSS, '--tls-ca', 'ca.pem'))).toEqual([
      `--elastic ${WSS}: this member listens for the others (tabs dial it from https pages), so it serves wss:// and needs --tls-cert and --tls-key; or give --no-listen`,
      '--tls-cert',
    ]);
  });
});

describe('reading the TLS files', () => {
  const certificate = makeTestCertificate();
  const other = makeTestCertificate();
  const cert = join(certificate.dir, 'cert.pem');
  const key = join(certificate.dir, 'key.pem');
  beforeAll(async () => {
    await writeFile(join(certificate.dir, 'garbage.pem'), 'not a certificate\n');
  });
  afterAll(() => {
    certificate.remove();
    other.remove();
  });

  async function refusal(paths: Parameters<typeof readTlsFiles>[0]): Promise<[string, string?]> {
    const error = await readTlsFiles(paths).then(
      () => null,
      (thrown: unknown) => thrown,
    );
    expect(UsageError.isInstance(error)).toBe(true);
    return [(error as UsageError).message, (error as UsageError).option];
  }

  it('reads a matching certificate and key, and a CA', async () => {
    const files = await readTlsFiles({ cert, key, ca: cert });
    expect(files.cert).toEqual(certificate.cert);
    expect(files.key).toEqual(certificate.key);
    expect(files.ca).toEqual(certificate.cert);
  });

  it('a missing file, a file that is no PEM, a key of another certificate: a UsageError naming the file', async () => {
    const missing = join(certificate.dir, 'missing.pem');
    expect(await refusal({ cert: missing, key, ca: null })).toEqual([
      `--tls-cert ${missing} cannot be read: ENOENT: no such file or directory, open '${missing}'`,
      '--tls-cert',
    ]);
    expect(await refusal({ cert, key: missing, ca: null })).toEqual([
      `--tls-key ${missing} cannot be read: ENOENT: no such file or directory, open '${missing}'`,
      '--tls-key',
    ]);
    const garbage = join(certificate.dir, 'garbage.pem');
    const [message, option] = await refusal({ cert: garbage, key, ca: null });
    expect(message.startsWith(`--tls-cert ${garbage} is not a PEM certificate: `)).toBe(true);
    expect(option).toBe('--tls-cert');
    const otherKey = join(other.dir, 'key.pem');
    expect(await refusal({ cert, key: otherKey, ca: null })).toEqual([
      `--tls-key ${otherKey} is not the key of --tls-cert ${cert} (CN=127.0.0.1)`,
      '--tls-key',
    ]);
    expect((await refusal({ cert: null, key: null, ca: garbage }))[1]).toBe('--tls-ca');
  });

  it('the CLI: a coordinator given a missing certificate exits 2 before it listens, naming the file', async () => {
    const missing = join(certificate.dir, 'missing.pem');
    const run = await runMain(
      ['--elastic-coordinator', '0', '--tls-cert', missing, '--tls-key', key],
      certificate.dir,
    );
    expect(run.exitCode).toBe(2);
    expect(run.stdout).toBe('');
    expect(run.stderr).toContain(
      `--tls-cert ${missing} cannot be read: ENOENT: no such file or directory, open '${missing}'`,
    );
  });
});
