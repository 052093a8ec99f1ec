import type { FaultHook } from '@webshard/fsdp/checkpoint';

/**
 * [Note: the trainer's fault points]
 * The trainer's fault-injection test (checkpoint/fault-injection.test.ts) kills a run with SIGKILL
 * at a seeded point, then resumes it. The points are the places a crash could leave something
 * behind: every stage of every file a checkpoint writes (`checkpointFault`, through fsdp's
 * `FaultHook`), the renames of a step folder and of `latest`, cleanup, and the end of every
 * training step. `WEBSHARD_TRAINER_KILL_AT=k` makes the k-th point this process passes kill it (no
 * handler runs, as with a power cut); unset, a point only counts, so a test can learn how many
 * points a run has (`faultPointsPassed`) and draw among them. `WEBSHARD_TRAINER_STOP_AT=k` freezes
 * it there instead (SIGSTOP to itself, a closed lid: the elastic tests wake it with SIGCONT). An
 * elastic streamed diloco member also passes a point where a fragment is issued, after the world
 * met and before its own issue (`fragment`): lost there, it leaves the others' fragment in flight
 * without its part. A diloco member of a job's first epoch passes one before the exchange of state
 * digests (`digest`, [Note: a state digest] in collectives): frozen there, the others wait in the
 * exchange for it. Every elastic member passes one first, before its set-up (`setup`): frozen there,
 * it leaves the others waiting in the set-up's collectives (the matmul's FMA agreed).
 */
const killAt = Number(process.env.WEBSHARD_TRAINER_KILL_AT ?? 0);
const stopAt = Number(process.env.WEBSHARD_TRAINER_STOP_AT ?? 0);
let passed = 0;

let slowed = 0;

/**
 * Count one fault point (`label` for a debugger), and die here if it is the chosen one. At the end
 * of a step, `WEBSHARD_TRAINER_SLOW_MS=t` also blocks the thread for t ms, as a slow laptop's
 * synchronous compute does (the elastic liveness tests: a slow member is not a frozen one), for
 * the first `WEBSHARD_TRAINER_SLOW_STEPS` steps (default all). Both are read at every step, so
 * that a test running the CLI in its own process can set them for one case.
 */
export function faultPoint(label: string): void {
  passed += 1;
  if (killAt > 0 && passed === killAt) process.kill(process.pid, 'SIGKILL');
  if (stopAt > 0 && passed === stopAt) process.kill(process.pid, 'SIGSTOP');
  if (label !== 'step') return;
  const slowMs = Number(process.env.WEBSHARD_TRAINER_SLOW_MS ?? 0);
  const slowSteps = Number(process.env.WEBSHARD_TRAINER_SLOW_STEPS ?? Number.POSITIVE_INFINITY);
  if (slowMs > 0 && slowed++ < slowSteps) {
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, slowMs);
  }
}

/**
 * `WEBSHARD_TRAINER_SLOW_BUILD_MS=t` blocks the thread for t ms once the model is built, as
 * building GPT-2 124M takes a member some 30 s of one core: the test of [Note: a member builds
 * before it joins] sees the others train on meanwhile. Not a fault point (it counts nothing).
 */
export function slowBuild(): void {
  const ms = Number(process.env.WEBSHARD_TRAINER_SLOW_BUILD_MS ?? 0);
  if (ms > 0) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/** How many fault points this process has passed. */
export function faultPointsPassed(): number {
  return passed;
}

/** Every stage of every checkpoint file's write as a fault point. */
export const checkpointFault: FaultHook = (_file, stage) => faultPoint(stage);

/**
 * How a member sends a newcomer's slice in the tests of [Note: a diloco join that does not stop
 * the world], which must see the members train on while a download lasts several syncs: at most
 * `WEBSHARD_TRAINER_JOIN_UPLOAD_BPS` bytes a second (a slow home uplink; unset: no limit), and only
 * after `WEBSHARD_TRAINER_JOIN_HOLD_SYNCS` more outer syncs of its own (a held sender; default 0).
 */
export function joinUploadLimit(): { bytesPerSecond?: number; holdSyncs: number } {
  // Read at each join, so that a test in this process can set them.
  const joinUpload = Number(process.env.WEBSHARD_TRAINER_JOIN_UPLOAD_BPS ?? 0);
  const joinHold = Number(process.env.WEBSHARD_TRAINER_JOIN_HOLD_SYNCS ?? 0);
  return { ...(joinUpload > 0 ? { bytesPerSecond: joinUpload } : {}), holdSyncs: joinHold };
}
