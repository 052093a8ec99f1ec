import { broadcastState, type ElasticGroup, type StateValue } from '@webshard/collectives';
import { type OptimizerStateDict, type Tensor, tensor } from '@webshard/tensor-core';
import { UsageError } from '../errors.js';
import type { Run } from './set-up.js';

/*
 * [Note: the trainer's elastic state]
 * After every change of membership (and when a member is admitted) every member takes rank 0's
 * state through `broadcastState` ([Note: elastic state transfer] in collectives): the step to
 * run next, every tensor AdamW steps (f32, bit for bit) and AdamW's state (its moments as f32,
 * its step counts and parameter groups as JSON). Rank 0 is the oldest survivor, so its state is
 * the job's; a newcomer's own initialization is overwritten, and so is a survivor's half-done step.
 */

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Rank 0's entries: the next step, the parameters, AdamW's moments and numbers. */
async function entriesOf(run: Run, step: number): Promise<Map<string, StateValue>> {
  const entries = new Map<string, StateValue>([['step', Int32Array.of(step)]]);
  for (const [index, param] of run.prepared.params.entries()) {
    entries.set(`param.${index}`, (await param.read()) as Float32Array);
  }
  await addOptimizerEntries(run, entries);
  return entries;
}

/** AdamW's moments (f32) and its numbers and parameter groups (JSON) into `entries`. */
export async function addOptimizerEntries(
  run: Run,
  entries: Map<string, StateValue>,
): Promise<void> {
  const dict = run.optimizer.stateDict();
  const numbers: Record<string, Record<string, unknown>> = {};
  for (const [index, state] of Object.entries(dict.state)) {
    for (const [key, value] of Object.entries(state)) {
      if (value !== null && typeof value === 'object') {
        entries.set(`optimizer.${index}.${key}`, (await (value as Tensor).read()) as Float32Array);
      } else {
        numbers[index] = { ...numbers[index], [key]: value };
      }
    }
  }
  const json = JSON.stringify({ numbers, param_groups: dict.param_groups });
  entries.set('optimizer', encoder.encode(json));
}

/** Puts rank 0's entries into this member's parameters and AdamW. */
async function apply(run: Run, entries: Map<string, StateValue>): Promise<void> {
  const { params } = run.prepared;
  for (const [index, param] of params.entries()) {
    const values = entries.get(`param.${index}`);
    if (!(values instanceof Float32Array) || values.length !== param.size) {
      throw new UsageError(
        `--elastic: parameter ${index} has ${param.size} elements here and ${values?.length ?? 'none'} on rank 0: every member must train the same model (the same flags)`,
        { option: '--elastic' },
      );
    }
    param.write(values);
  }
  await applyOptimizer(run, entries);
}

/** Loads the optimizer state of `addOptimizerEntries` into this member's AdamW. */
export async function applyOptimizer(run: Run, entries: Map<string, StateValue>): Promise<void> {
  const { numbers, param_groups } = JSON.parse(decoder.decode(entries.get('optimizer'))) as {
    numbers: Record<string, Record<string, number>>;
    param_groups: OptimizerStateDict['param_groups'];
  };
  const dict: OptimizerStateDict = { state: {}, param_groups };
  for (const [index, values] of Object.entries(numbers)) dict.state[Number(index)] = { ...values };
  const made: Tensor[] = [];
  // State dict indices count the parameters group by group, in the optimizer's order.
  const indexed = run.optimizer.paramGroups.flatMap((group) => group.params);
  for (const [name, values] of entries) {
    if (!name.startsWith('optimizer.')) continue;
    const [, index, key] = name.split('.');
    const param = indexed[Number(index)]!;
    const state = tensor(values as Float32Array, { shape: param.shape, backend: param.backend });
    made.push(state);
    dict.state[Number(index)] = { ...dict.state[Number(index)], [key!]: state };
  }
  try {
    await run.optimizer.loadStateDict(dict);
  } finally {
    for (const t of made) t.free();
  }
}

/**
 * Every member calls it after a change: rank 0 sends its state, the others take it. Returns the
 * step to run next.
 */
export async function shareRunState(
  run: Run,
  elastic: ElasticGroup,
  step: number,
): Promise<number> {
  // DDP's own set-up broadcasts first: collectives must be issued in the same order everywhere.
  await run.prepared.ready;
  const lead = elastic.group.rank === 0;
  const entries = lead ? await entriesOf(run, step) : undefined;
  const received = await broadcastState(elastic.group, entries);
  if (lead) return step;
  await apply(run, received);
  return (received.get('step') as Int32Array)[0]!;
}
