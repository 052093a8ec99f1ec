import type { TlsPaths, TrainConfig } from '../config.js';
import { UsageError } from '../errors.js';

/** The flags of an elastic world over the internet ([Note: an elastic job over the internet]). */
export const TLS_OPTIONS = {
  'tls-cert': { type: 'string' },
  'tls-key': { type: 'string' },
  'tls-ca': { type: 'string' },
  'no-listen': { type: 'boolean' },
} as const;

/**
 * `--tls-cert FILE --tls-key FILE` (serve `https`/`wss`), `--tls-ca FILE` (trust a private CA)
 * and `--no-listen` (a member behind a NAT), checked against the rest of `config` (its elastic
 * fields already set): what they cannot mean is refused by name before anything starts. The
 * files are read when the job starts (../ranks/tls-files.ts), so a bad path names the file there.
 */
export function tlsOptions(
  v: Record<string, string | boolean | undefined>,
  config: TrainConfig,
): Pick<TrainConfig, 'tls' | 'noListen' | 'transport'> {
  const cert = (v['tls-cert'] as string | undefined) ?? null;
  const key = (v['tls-key'] as string | undefined) ?? null;
  const ca = (v['tls-ca'] as string | undefined) ?? null;
  const noListen = v['no-listen'] === true;
  const given = cert !== null || key !== null || ca !== null;
  const coordinator = Boolean(config.elasticCoordinator);
  const member = typeof config.elastic === 'string';
  if ((cert === null) !== (key === null)) {
    // Names the one missing.
    throw new UsageError('--tls-cert and --tls-key go together', {
      option: cert === null ? '--tls-cert' : '--tls-key',
    });
  }
  if (given && !coordinator && !member) {
    const option = cert !== null ? '--tls-cert' : '--tls-ca';
    throw new UsageError(
      `${option} applies to --elastic-coordinator and --elastic (for --browser-ranks, set WEBSHARD_TLS_CERT and WEBSHARD_TLS_KEY: its launched ranks read them)`,
      { option },
    );
  }
  if (coordinator && ca !== null) {
    throw new UsageError('--tls-ca applies to --elastic: the coordinator dials nobody', {
      option: '--tls-ca',
    });
  }
  if (noListen && !member) {
    throw new UsageError('--no-listen applies to --elastic (a member behind a NAT)', {
      option: '--no-listen',
    });
  }
  let transport = config.transport;
  if (member) {
    const secure = config.elastic!.startsWith('wss://');
    if (given && !secure) {
      throw new UsageError(
        `--elastic ${config.elastic} with TLS flags: the coordinator's URL must be wss://, or the join token crosses the network in the clear`,
        { option: '--elastic' },
      );
    }
    // A member of a TLS world, or one that listens on nothing, sends its data over ws: it has TLS
    // and its relay; tcp has neither.
    const needsWs = secure || noListen;
    if (needsWs && v.transport === undefined) transport = 'ws';
    if (needsWs && transport !== 'ws') {
      const why = secure
        ? "the tcp transport has no TLS: its hello would carry the join token in the clear (the coordinator's URL is wss://)"
        : 'a member that listens on nothing is reached through a member that listens, which only ws relays';
      throw new UsageError(`--transport ${transport} with --elastic: ${why}; use --transport ws`, {
        option: '--transport',
      });
    }
    if (secure && !noListen && cert === null) {
      throw new UsageError(
        `--elastic ${config.elastic}: this member listens for the others (tabs dial it from https pages), so it serves wss:// and needs --tls-cert and --tls-key; or give --no-listen`,
        { option: '--tls-cert' },
      );
    }
  }
  const tls: TlsPaths | null = given ? { cert, key, ca } : null;
  return { tls, noListen, transport };
}
