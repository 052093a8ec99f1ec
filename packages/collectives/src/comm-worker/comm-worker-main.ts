import { parentPort, workerData } from 'node:worker_threads';
import { connectNetworkTransport } from '../connect-transport.js';
import type { HostData } from '../operand.js';
import { ProcessGroup } from '../process-group.js';
import { shmTransport } from '../transports/shm/join-shm.js';
import {
  type CommWorkerInit,
  CONTROL_SLOTS,
  controlViews,
  type FromWorker,
  type OpMessage,
  type SharedOperand,
  sharedClock,
  type ToWorker,
} from './handshake.js';
import { postError } from './posted-error.js';

/**
 * The communication worker's body ([Note: the communication worker handshake] in handshake.ts):
 * joins the rendezvous and connects the `tcp` or `ws` transport (`connectNetworkTransport`: rank
 * 0's worker hosts the store), or attaches the rank's end of a shared-memory world's rings, runs the world `ProcessGroup` on it (and the sub-groups the rank's
 * `newGroup` calls make) and runs the ops the rank's thread posts, in the order they come,
 * signalling each completion through the control block. Started by `CommWorker.start`; runs when imported as a worker's module.
 */

/** A typed-array view on an operand's shared memory. */
function viewOf(operand: SharedOperand): HostData {
  const { buffer, byteOffset, length, dtype } = operand;
  if (dtype === 'f32') return new Float32Array(buffer, byteOffset, length);
  if (dtype === 'i32') return new Int32Array(buffer, byteOffset, length);
  return new Uint16Array(buffer, byteOffset, length);
}

/** The 16-bit dtype of an operand, as the group's options want it. */
function halfOf(operand: SharedOperand): { dtype?: 'f16' | 'bf16' } {
  return operand.dtype === 'f16' || operand.dtype === 'bf16' ? { dtype: operand.dtype } : {};
}

/** Starts the op of `message` on `group`. */
function issue(group: ProcessGroup, message: OpMessage): Promise<void> {
  const deadline = message.timeoutMs === undefined ? {} : { timeoutMs: message.timeoutMs };
  switch (message.type) {
    case 'allReduce':
      return group
        .allReduce(viewOf(message.data), { op: message.op, ...deadline, ...halfOf(message.data) })
        .wait();
    case 'allGather':
      return group
        .allGather(viewOf(message.input), viewOf(message.output), {
          ...deadline,
          ...halfOf(message.input),
        })
        .wait();
    case 'reduceScatter':
      return group
        .reduceScatter(viewOf(message.input), viewOf(message.output), {
          op: message.op,
          ...deadline,
          ...halfOf(message.input),
        })
        .wait();
    case 'broadcast':
      return group
        .broadcast(viewOf(message.data), message.root, { ...deadline, ...halfOf(message.data) })
        .wait();
    case 'send':
      return group
        .send(viewOf(message.data), message.peer, { ...deadline, ...halfOf(message.data) })
        .wait();
    case 'recv':
      return group
        .recv(viewOf(message.data), message.peer, { ...deadline, ...halfOf(message.data) })
        .wait();
    case 'barrier':
      return group.barrier(deadline).wait();
  }
}

async function main(init: CommWorkerInit, port: NonNullable<typeof parentPort>): Promise<void> {
  const post = (message: FromWorker) => port.postMessage(message);
  const { words, completedAt } = controlViews(init.control);
  let world: ProcessGroup;
  try {
    const transport =
      init.shm !== undefined
        ? shmTransport(init.shm.handle, init.shm.rank)
        : await connectNetworkTransport(init.connect!);
    world = ProcessGroup.fromTransport(transport, init.group);
    transport.onAbort((reason) => post({ type: 'aborted', reason }));
  } catch (error) {
    post({ type: 'init-failed', error: postError(error) });
    port.close();
    return;
  }
  // The world is 0; each `newGroup` call adds its number, null on a rank outside the new group.
  const groups = new Map<number, ProcessGroup | null>([[0, world]]);
  port.on('message', (message: ToWorker) => {
    if (message.type === 'abort') {
      world.transport.abort(message.reason);
      return;
    }
    if (message.type === 'newGroup') {
      groups.set(message.id, groups.get(message.parent)!.newGroup(message.ranks, message.options));
      return;
    }
    if (message.type === 'closeGroup') {
      void groups.get(message.group)?.close();
      return;
    }
    if (message.type === 'close') {
      void world
        .close()
        .catch(() => {})
        .then(() => port.close());
      return;
    }
    const slot = message.id % CONTROL_SLOTS;
    let running: Promise<void>;
    try {
      running = issue(groups.get(message.group)!, message);
    } catch (error) {
      running = Promise.reject(error);
    }
    running.then(
      () => {
        completedAt[slot] = sharedClock();
        Atomics.store(words, slot, message.id + 1);
        Atomics.notify(words, slot);
      },
      (error: unknown) => {
        completedAt[slot] = sharedClock();
        post({ type: 'failed', id: message.id, error: postError(error) });
        Atomics.store(words, slot, -(message.id + 1));
        Atomics.notify(words, slot);
      },
    );
  });
  const { rank, size, kind } = world.transport;
  post({ type: 'ready', rank, size, kind });
}

if (parentPort !== null && (workerData as { commWorker?: CommWorkerInit })?.commWorker) {
  void main((workerData as { commWorker: CommWorkerInit }).commWorker, parentPort);
}
