// The playground's training loop, in a worker so the page never freezes ([Note: the playground's
// loop]). The page posts `ToWorker` messages; this posts `FromWorker` ones back.
import { chooseBackend } from './choose-backend.js';
import { EVAL_EVERY, type FromWorker, SAMPLE_LENGTH, type ToWorker } from './protocol.js';
import { TrainingSession } from './training-session.js';

const post = (message: FromWorker) => (self as unknown as Worker).postMessage(message);

let session: TrainingSession | null = null;
/** Whether the page wants steps; `pause` and `reset` clear it, the loop stops at its next step. */
let running = false;
/** Bumped by reset: a loop of an older session stops at its next step. */
let generation = 0;
/** The work under way (a loop, a disposal): the next one starts after it, never beside it. */
let queue: Promise<void> = Promise.resolve();

/**
 * [Note: the playground's loop]
 * The worker steps the session while it runs, posting each step's point, and every `EVAL_EVERY`
 * steps the held-out loss and a sample (so the page shows the sample improving). Between steps
 * it yields to its message queue (a macrotask), so a `pause` or `reset` takes effect after the
 * step under way: a step is never cut in half, and the model is never freed under a step. A reset
 * drops the session (its backend too); `start` after it builds a new one from the settings and
 * text it brings, choosing the backend again ([Note: the playground's backend]).
 */
async function run(message: Extract<ToWorker, { type: 'start' }>): Promise<void> {
  const mine = generation;
  if (session === null) {
    const choice = await chooseBackend(message.settings, message.text, message.name);
    if (mine !== generation) {
      choice.backend.dispose();
      return;
    }
    session = TrainingSession.create(message.text, message.name, message.settings, choice.backend);
    post({
      type: 'backend',
      kind: choice.backend.kind,
      reason: choice.reason,
      parameters: session.parameterCount,
      vocab: session.data.vocabSize,
    });
    await evaluate(session);
  }
  post({ type: 'state', state: 'running' });
  const current = session;
  while (running && mine === generation && !current.finished) {
    const point = await current.step();
    if (mine !== generation) return;
    post({ type: 'step', point });
    if (point.step % EVAL_EVERY === 0 || current.finished) await evaluate(current);
    await new Promise((resolve) => setTimeout(resolve, 0));
  }
  if (mine !== generation) return;
  if (current.finished) running = false;
  post({ type: 'state', state: current.finished ? 'finished' : 'paused' });
}

async function evaluate(current: TrainingSession): Promise<void> {
  const loss = await current.heldOutLoss();
  const sample = await current.sample(SAMPLE_LENGTH);
  post({ type: 'eval', step: current.stepsDone, loss, sample });
}

self.onmessage = (event: MessageEvent<ToWorker>) => {
  const message = event.data;
  if (message.type === 'start') {
    if (running) return;
    running = true;
    queue = queue
      .then(() => run(message))
      .catch((error: Error) => {
        running = false;
        post({ type: 'error', name: error.name, message: error.message });
      });
  } else if (message.type === 'pause') {
    running = false;
  } else {
    generation++;
    running = false;
    const old = session;
    session = null;
    // Freed once the step under way (if any) has ended.
    queue = queue.then(() => old?.dispose());
    post({ type: 'state', state: 'idle' });
  }
};
