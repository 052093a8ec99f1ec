import { parentPort, workerData } from 'node:worker_threads';
import { createNetworkTransport } from '../connect-transport.js';
import type { HostData } from '../operand.js';
import { ProcessGroup } from '../process-group.js';
import type { Rendezvous } from '../rendezvous/rendezvous.js';
import { StoreClient } from '../rendezvous/store-client.js';
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
 * joins the store, connects the `tcp` transport, runs a `ProcessGroup` on it and runs the ops the
 * rank's thread posts, in the order they come, signalling each completion through the control
 * block. Started by `CommWorker.start`; runs when imported as a worker's module.
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
    case 'barrier':
      return group.barrier(deadline).wait();
  }
}

async function main(init: CommWorkerInit, port: NonNullable<typeof parentPort>): Promise<void> {
  const post = (message: FromWorker) => port.postMessage(message);
  const { words, completedAt } = controlViews(init.control);
  let group: ProcessGroup;
  let store: StoreClient;
  try {
    store = await StoreClient.connect({
      url: init.storeUrl,
      rank: init.rank,
      worldSize: init.size,
      token: init.token,
      timeoutMs: init.timeoutMs,
    });
    const joined: Rendezvous = {
      store,
      options: {
        rank: init.rank,
        worldSize: init.size,
        masterAddr: '127.0.0.1',
        masterPort: 0,
        localRank: init.rank,
        token: init.token,
        timeoutMs: init.timeoutMs,
      },
      close: () => store.close(),
    };
    const transport = await createNetworkTransport('tcp', joined, { host: '127.0.0.1' });
    group = ProcessGroup.fromTransport(transport, init.group);
    transport.onAbort((reason) => post({ type: 'aborted', reason }));
  } catch (error) {
    post({ type: 'init-failed', error: postError(error) });
    port.close();
    return;
  }
  port.on('message', (message: ToWorker) => {
    if (message.type === 'abort') {
      group.abort(message.message);
      return;
    }
    if (message.type === 'close') {
      void group
        .close()
        .catch(() => {})
        .then(() => store.close())
        .catch(() => {})
        .then(() => {
          post({ type: 'closed' });
          port.close();
        });
      return;
    }
    const slot = message.id % CONTROL_SLOTS;
    let running: Promise<void>;
    try {
      running = issue(group, message);
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
  post({ type: 'ready' });
}

if (parentPort !== null && (workerData as { commWorker?: CommWorkerInit })?.commWorker) {
  void main((workerData as { commWorker: CommWorkerInit }).commWorker, parentPort);
}
