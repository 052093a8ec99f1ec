import {
  broadcastState,
  type ElasticGroup,
  receiveStateSlices,
  sendStateSlices,
  type StateValue,
} from '@webshard/collectives';
import {
  type DiLoCo,
  decodeJoinState,
  encodeJoinState,
  JoinCatchUp,
  type JoinStateOptions,
  packJoinEntries,
  roundJoinMomentum,
  unpackJoinEntries,
} from '@webshard/diloco';
import { joinUploadLimit } from '#platform';
import type { Run } from './set-up.js';

/*
 * [Note: a diloco join that does not stop the world]
 * Under `--strategy diloco --elastic` (not streamed) a member that has no state yet (a newcomer, a
 * member admitted again, or one whose download a change cut short) gets it without holding the
 * others: after every change, rank 0 broadcasts the step and whether the world is at a sync point
 * (a few bytes), every rank says whether it needs the state (an all-gather of one flag), and when
 * some do, every member that holds it rounds its outer momentum to the join's format and takes a
 * snapshot ([Note: a compressed join] in @webshard/diloco: the global copy exact, the momentum
 * int8, no AdamW; packed losslessly, [Note: a join in planes]), then sends its slice of it to each newcomer on a group of its own ([Note: a state
 * in slices from several members] in @webshard/collectives) in the background and trains on. A
 * newcomer takes part in every outer sync while it downloads, with weight 0, keeping the averages
 * (`JoinCatchUp`, [Note: catching up a join]); at the first sync point after its download is in it
 * loads the snapshot, replays the kept averages, prints the global digest (the members' at that
 * step, bit for bit) and trains from there. A change while it downloads aborts the transfer with
 * the epoch's group: the newcomer still needs the state and gets a new snapshot in the new epoch.
 * What the members pay: one snapshot in memory (5 bytes a parameter) while they send, and their
 * uplink's share of the bytes; they never wait for the download.
 */

/** The join's momentum format ([Note: a compressed join]). */
export const JOIN_FORMAT: JoinStateOptions = { momentum: 'int8' };

/**
 * The bytes of one point-to-point op of a slice: 256 KiB (progress moves about 10 times a second
 * at 20 Mbit/s), or less for a small model so that its progress moves too (about 64 chunks, at
 * least 4 KiB). Every rank computes it from the parameter count, so senders and receivers agree.
 */
function chunkBytes(parameters: number): number {
  const even = Math.ceil((parameters * 5) / 64 / 4) * 4;
  return Math.min(256 * 1024, Math.max(4096, even));
}

/** How far a newcomer's download is: what the join page shows. */
export interface JoinProgress {
  /** Bytes of the state received so far. */
  readonly receivedBytes: number;
  /** Bytes of the whole state (0 until the manifest arrived). */
  readonly totalBytes: number;
  /** Seconds since the download began. */
  readonly seconds: number;
  /** How many members send a slice each. */
  readonly senders: number;
  /** True once the state is loaded and caught up. */
  readonly done: boolean;
}

/** A newcomer's download in progress. */
export interface JoinDownload {
  readonly catchUp: JoinCatchUp;
  /** The received entries once every slice is in; undefined before. */
  entries: Map<string, StateValue> | undefined;
  /** The transfer's failure, when a sender was lost (a change follows). */
  failed: unknown;
  readonly started: number;
  readonly senders: number;
  receivedBytes: number;
  totalBytes: number;
}

/** What `shareOuterStateInSlices` returns. */
export interface SharedOuter {
  readonly step: number;
  readonly pending: boolean;
  /** The download begun on a member that needs the state. */
  readonly download: JoinDownload | null;
  /** No member holds a state yet: take rank 0's whole (`shareOuterState`). */
  readonly fresh: boolean;
  /**
   * On a member that sends: start its upload now, or after `holdSyncs` outer syncs (the tests'
   * held sender, `WEBSHARD_TRAINER_JOIN_HOLD_SYNCS`).
   */
  readonly upload?: { readonly holdSyncs: number; readonly start: () => void };
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function dilocoOf(run: Run): DiLoCo {
  const diloco = run.prepared.outer?.diloco ?? null;
  if (diloco === null) throw new Error('the diloco strategy is not started');
  return diloco;
}

/**
 * Every member calls it after a change (a newcomer once admitted), with whether it holds no state
 * (`needsState`): returns rank 0's step and `pending`, and on a member that needs the state the
 * download begun ([Note: a diloco join that does not stop the world]). `fresh`: no member holds a
 * state (the job's first epoch, nobody trained yet): every rank then takes rank 0's at once
 * (`shareOuterState`), as before.
 */
export async function shareOuterStateInSlices(
  run: Run,
  elastic: ElasticGroup,
  step: number,
  pending: boolean,
  needsState: boolean,
  onProgress: (progress: JoinProgress) => void,
): Promise<SharedOuter> {
  const group = elastic.group;
  const meta = group.rank === 0 ? encoder.encode(JSON.stringify({ step, pending })) : undefined;
  const received = await broadcastState(
    group,
    meta === undefined ? undefined : new Map([['outer.meta', meta]]),
  );
  const shared = JSON.parse(decoder.decode(received.get('outer.meta'))) as {
    step: number;
    pending: boolean;
  };
  const flags = new Int32Array(group.size);
  await group.allGather(Int32Array.of(needsState ? 1 : 0), flags).wait();
  // Every rank makes the epoch's transfer group, in the same order, whether or not it is used.
  const transfer = group.newGroup(Array.from({ length: group.size }, (_, r) => r))!;
  const receivers = [...flags.keys()].filter((r) => flags[r] === 1);
  const senders = [...flags.keys()].filter((r) => flags[r] === 0);
  if (receivers.length === 0) return { ...shared, download: null, fresh: false };
  // Nobody trained yet (the job's first epoch): everyone takes rank 0's state at once instead.
  if (senders.length === 0) return { ...shared, download: null, fresh: true };
  const diloco = dilocoOf(run);
  const parameters = run.prepared.params.reduce((sum, param) => sum + param.size, 0);
  const slices = { senders, receivers, chunkBytes: chunkBytes(parameters) };
  if (!needsState) {
    await diloco.roundMomentum((momentum) => roundJoinMomentum(momentum, JOIN_FORMAT));
    // Packed losslessly ([Note: a join in planes]): 0.86 of the bytes at GPT-2 124M.
    const snapshot = packJoinEntries(encodeJoinState(await diloco.readStateDict(), JOIN_FORMAT));
    // In the background: the member trains on; a change aborts it with the epoch's group.
    const { holdSyncs, ...limit } = joinUploadLimit();
    const upload = () => {
      sendStateSlices(transfer, snapshot, { ...slices, ...limit }).catch(() => {});
    };
    return { ...shared, download: null, fresh: false, upload: { holdSyncs, start: upload } };
  }
  const download: JoinDownload = {
    catchUp: new JoinCatchUp(diloco),
    entries: undefined,
    failed: undefined,
    started: performance.now(),
    senders: senders.length,
    receivedBytes: 0,
    totalBytes: 0,
  };
  const report = (done: boolean) =>
    onProgress({
      receivedBytes: download.receivedBytes,
      totalBytes: download.totalBytes,
      seconds: (performance.now() - download.started) / 1000,
      senders: download.senders,
      done,
    });
  report(false);
  receiveStateSlices(transfer, {
    ...slices,
    onProgress: (bytes, total) => {
      download.receivedBytes = bytes;
      download.totalBytes = total;
      report(false);
    },
  }).then(
    (entries) => {
      download.entries = entries;
    },
    (error: unknown) => {
      download.failed = error;
    },
  );
  return { ...shared, download, fresh: false };
}

/**
 * At a sync point after the outer sync: when `download`'s slices are all in, loads the snapshot and
 * replays the syncs it missed. Returns true when the member now holds the world's state.
 */
export async function finishDownload(download: JoinDownload): Promise<boolean> {
  const entries = download.entries;
  if (entries === undefined) return false;
  download.entries = undefined;
  await download.catchUp.finish(decodeJoinState(unpackJoinEntries(entries)));
  return true;
}
