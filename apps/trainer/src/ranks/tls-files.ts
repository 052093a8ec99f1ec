import { createPrivateKey, X509Certificate } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import type { TlsPaths } from '../config.js';
import { UsageError } from '../errors.js';

/** The PEM contents of `--tls-cert`, `--tls-key` and `--tls-ca`, those given. */
export interface TlsFiles {
  cert?: Buffer;
  key?: Buffer;
  ca?: Buffer;
}

async function read(option: string, path: string): Promise<Buffer> {
  try {
    return await readFile(path);
  } catch (error) {
    throw new UsageError(`${option} ${path} cannot be read: ${(error as Error).message}`, {
      option,
      cause: error,
    });
  }
}

function parsed<T>(option: string, path: string, what: string, parse: () => T): T {
  try {
    return parse();
  } catch (error) {
    throw new UsageError(`${option} ${path} is not a PEM ${what}: ${(error as Error).message}`, {
      option,
      cause: error,
    });
  }
}

/**
 * Reads the files `paths` names and checks them before anything listens: each is PEM of its kind
 * and the key is the certificate's, so a wrong file is a `UsageError` naming the flag and the path
 * (exit 2) instead of a handshake that fails later in every tab.
 */
export async function readTlsFiles(paths: TlsPaths): Promise<TlsFiles> {
  const files: TlsFiles = {};
  if (paths.cert !== null && paths.key !== null) {
    const cert = await read('--tls-cert', paths.cert);
    const key = await read('--tls-key', paths.key);
    const x509 = parsed('--tls-cert', paths.cert, 'certificate', () => new X509Certificate(cert));
    const privateKey = parsed('--tls-key', paths.key, 'private key', () => createPrivateKey(key));
    if (!x509.checkPrivateKey(privateKey)) {
      throw new UsageError(
        `--tls-key ${paths.key} is not the key of --tls-cert ${paths.cert} (${x509.subject.replace(/\n/g, ', ')})`,
        { option: '--tls-key' },
      );
    }
    files.cert = cert;
    files.key = key;
  }
  if (paths.ca !== null) {
    const ca = await read('--tls-ca', paths.ca);
    parsed('--tls-ca', paths.ca, 'certificate', () => new X509Certificate(ca));
    files.ca = ca;
  }
  return files;
}
