import type { FromWorker, ToWorker } from '../session/protocol.js';
import { DEFAULT_SETTINGS, MODEL_SIZES, type ModelSize } from '../session/settings.js';
import type { StepPoint } from '../session/training-session.js';
import { byId, formatBytes, formatCount } from './format.js';
import { LiveChart } from './live-chart.js';

const MARKUP = `
<section class="controls">
  <label>text
    <select id="corpus">
      <option value="sonnets">Shakespeare's sonnets (23 KB, shipped)</option>
      <option value="file" disabled>your file</option>
    </select>
  </label>
  <label class="file">or a text file of yours <input type="file" id="file" accept=".txt,.md,text/*"></label>
  <label>model
    <select id="size">
      <option value="tiny">tiny: 2 layers x 64 (pnpm train's)</option>
      <option value="small">small: 4 layers x 128</option>
      <option value="medium">medium: 6 layers x 192</option>
    </select>
  </label>
  <label>backend
    <select id="backend">
      <option value="auto">auto (measure)</option>
      <option value="webgpu">WebGPU</option>
      <option value="cpu">CPU (WebAssembly)</option>
    </select>
  </label>
  <label>steps <input id="steps" type="number" min="10" max="100000" value="${DEFAULT_SETTINGS.steps}"></label>
  <span class="buttons">
    <button id="start">start</button>
    <button id="pause" disabled>pause</button>
    <button id="reset" disabled>reset</button>
  </span>
</section>
<p id="backend-line" class="status">Press start: the model trains in this tab, in a worker.</p>
<section class="stats">
  <div><span>step</span><b id="stat-step">0</b></div>
  <div><span>loss</span><b id="stat-loss">-</b></div>
  <div><span>held-out loss</span><b id="stat-eval">-</b></div>
  <div><span>step time</span><b id="stat-ms">-</b></div>
  <div><span>tokens/s</span><b id="stat-speed">-</b></div>
  <div><span>memory now (peak)</span><b id="stat-memory">-</b></div>
</section>
<section class="charts">
  <label class="option"><input type="checkbox" id="log-loss"> log-scale loss</label>
  <figure id="chart-loss"></figure>
  <figure id="chart-speed"></figure>
</section>
<section class="sample">
  <h2 id="sample-title">sample</h2>
  <pre id="sample">(a sample appears here once the model has trained a little)</pre>
</section>`;

/** What the page exposes for tests and the console: `window.webshardPlayground`. */
export interface PlaygroundState {
  state: 'idle' | 'starting' | 'running' | 'paused' | 'finished' | 'failed';
  backend: { kind: string; reason: string } | null;
  steps: StepPoint[];
  evals: { step: number; loss: number; sample: string }[];
  error: string | null;
  charts: LiveChart[];
}

/**
 * The playground's training view: controls, the backend line (which backend and why), live
 * statistics, loss and tokens/s charts, and the latest sample. The training itself runs in a
 * worker (../session/train-worker.ts); this view only posts start, pause and reset and draws
 * what comes back.
 */
export function mountTrainView(root: HTMLElement): PlaygroundState {
  root.innerHTML = MARKUP;
  // The trainer's corpus, served beside the page (vite.config.ts); fetched once, when first used.
  let sonnets: Promise<Uint8Array> | null = null;
  const shipped = () => {
    sonnets ??= fetch(new URL('./sonnets.txt', document.baseURI)).then(async (response) => {
      if (!response.ok) throw new Error(`GET sonnets.txt: ${response.status}`);
      return new Uint8Array(await response.arrayBuffer());
    });
    return sonnets;
  };
  let text: { bytes: Uint8Array | null; name: string } = { bytes: null, name: 'sonnets.txt' };
  const state: PlaygroundState = {
    state: 'idle',
    backend: null,
    steps: [],
    evals: [],
    error: null,
    charts: [],
  };
  const loss = new LiveChart(byId('chart-loss'), {
    title: 'loss',
    yLabel: 'loss',
    series: [
      { label: 'train loss', color: '#1f77b4' },
      { label: 'held-out loss', color: '#d62728', points: true },
    ],
  });
  const speed = new LiveChart(byId('chart-speed'), {
    title: 'tokens per second',
    yLabel: 'tokens/s',
    series: [{ label: 'tokens/s', color: '#2ca02c' }],
    format: (v) => formatCount(v),
  });
  state.charts.push(loss, speed);

  const worker = new Worker(new URL('../session/train-worker.ts', import.meta.url), {
    type: 'module',
  });
  const send = (message: ToWorker) => worker.postMessage(message);
  const settingsInputs = ['corpus', 'file', 'size', 'backend', 'steps'].map((id) => byId(id));
  const start = byId<HTMLButtonElement>('start');
  const pause = byId<HTMLButtonElement>('pause');
  const reset = byId<HTMLButtonElement>('reset');

  const setState = (next: PlaygroundState['state']) => {
    state.state = next;
    start.disabled = next === 'running' || next === 'starting' || next === 'finished';
    start.textContent = next === 'paused' ? 'resume' : 'start';
    pause.disabled = next !== 'running';
    reset.disabled = next === 'idle' || next === 'starting';
    // The model's shape is fixed once it exists: settings change after a reset.
    for (const input of settingsInputs) {
      (input as HTMLInputElement).disabled = next !== 'idle' && next !== 'failed';
    }
    if (next === 'idle' || next === 'failed') {
      byId<HTMLOptionElement>('corpus').querySelector<HTMLOptionElement>('[value=file]')!.disabled =
        text.name === 'sonnets.txt';
    }
  };

  const useFile = async (file: File) => {
    text = { bytes: new Uint8Array(await file.arrayBuffer()), name: file.name };
    const option = byId('corpus').querySelector<HTMLOptionElement>('[value=file]')!;
    option.disabled = false;
    option.textContent = `${file.name} (${formatBytes(file.size)})`;
    byId<HTMLSelectElement>('corpus').value = 'file';
  };
  byId<HTMLInputElement>('file').addEventListener('change', (event) => {
    const file = (event.target as HTMLInputElement).files?.[0];
    if (file) void useFile(file);
  });
  document.addEventListener('dragover', (event) => event.preventDefault());
  document.addEventListener('drop', (event) => {
    event.preventDefault();
    const file = event.dataTransfer?.files[0];
    if (file && (state.state === 'idle' || state.state === 'failed')) void useFile(file);
  });
  byId<HTMLSelectElement>('corpus').addEventListener('change', (event) => {
    if ((event.target as HTMLSelectElement).value === 'sonnets') {
      text = { bytes: null, name: 'sonnets.txt' };
    }
  });
  byId<HTMLInputElement>('log-loss').addEventListener('change', (event) => {
    loss.setLog((event.target as HTMLInputElement).checked);
  });

  start.addEventListener('click', async () => {
    const size = byId<HTMLSelectElement>('size').value as ModelSize;
    const steps = Math.max(10, Math.min(100_000, Number(byId<HTMLInputElement>('steps').value)));
    const settings = {
      ...DEFAULT_SETTINGS,
      ...MODEL_SIZES[size],
      steps,
      backend: byId<HTMLSelectElement>('backend').value as 'auto' | 'webgpu' | 'cpu',
    };
    if (state.state === 'idle' || state.state === 'failed') {
      byId('backend-line').textContent = 'choosing the backend...';
      setState('starting');
    }
    try {
      const bytes = text.bytes ?? (await shipped());
      // A copy: the worker keeps its own, and the page may start again after a reset.
      send({ type: 'start', text: bytes.slice(), name: text.name, settings });
    } catch (error) {
      state.error = (error as Error).message;
      byId('backend-line').textContent = `failed: ${state.error}`;
      setState('failed');
    }
  });
  pause.addEventListener('click', () => send({ type: 'pause' }));
  reset.addEventListener('click', () => {
    send({ type: 'reset' });
    state.steps = [];
    state.evals = [];
    state.backend = null;
    loss.clear();
    speed.clear();
    for (const id of ['stat-loss', 'stat-eval', 'stat-ms', 'stat-speed', 'stat-memory']) {
      byId(id).textContent = '-';
    }
    byId('stat-step').textContent = '0';
    byId('sample').textContent = '(a sample appears here once the model has trained a little)';
    byId('sample-title').textContent = 'sample';
    byId('backend-line').textContent = 'Press start: the model trains in this tab, in a worker.';
  });

  worker.onmessage = (event: MessageEvent<FromWorker>) => {
    const message = event.data;
    switch (message.type) {
      case 'backend':
        state.backend = { kind: message.kind, reason: message.reason };
        byId('backend-line').textContent =
          `training a ${formatCount(message.parameters)}-parameter GPT (vocabulary ${message.vocab}) on ${message.reason}`;
        break;
      case 'step': {
        const p = message.point;
        state.steps.push(p);
        loss.add(0, p.step, p.loss);
        speed.add(0, p.step, p.tokensPerSecond);
        byId('stat-step').textContent = `${p.step}`;
        byId('stat-loss').textContent = p.loss.toFixed(4);
        byId('stat-ms').textContent = `${p.ms.toFixed(1)} ms`;
        byId('stat-speed').textContent = formatCount(Math.round(p.tokensPerSecond));
        byId('stat-memory').textContent =
          `${formatBytes(p.allocatedBytes)} (${formatBytes(p.peakAllocatedBytes)})`;
        break;
      }
      case 'eval':
        state.evals.push({ step: message.step, loss: message.loss, sample: message.sample });
        loss.add(1, message.step, message.loss);
        byId('stat-eval').textContent = message.loss.toFixed(4);
        byId('sample-title').textContent = `sample after step ${message.step}`;
        byId('sample').textContent = message.sample;
        break;
      case 'state':
        setState(message.state);
        break;
      case 'error':
        state.error = `${message.name}: ${message.message}`;
        byId('backend-line').textContent = `failed: ${state.error}`;
        setState('failed');
        break;
    }
  };
  return state;
}
