import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * A throwaway self-signed certificate for 127.0.0.1, made by openssl for a test. `cert` and `key`
 * are the PEM files' bytes (Buffers in Node, declared as Uint8Array so that the testing entry's
 * declarations need no Node types).
 */
export interface TestCertificate {
  /** The folder holding `cert.pem` and `key.pem`. */
  readonly dir: string;
  readonly cert: Uint8Array;
  readonly key: Uint8Array;
  /** Deletes the folder. */
  remove(): void;
}

/** Makes a certificate valid for a day (EC P-256: fast to make and to handshake). */
export function makeTestCertificate(): TestCertificate {
  const dir = mkdtempSync(join(tmpdir(), 'webshard-tls-'));
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-days',
      '1',
      '-subj',
      '/CN=127.0.0.1',
      '-addext',
      'subjectAltName=IP:127.0.0.1',
      '-keyout',
      'key.pem',
      '-out',
      'cert.pem',
    ],
    { stdio: 'ignore', cwd: dir },
  );
  return {
    dir,
    cert: readFileSync(join(dir, 'cert.pem')),
    key: readFileSync(join(dir, 'key.pem')),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}
