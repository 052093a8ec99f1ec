import {
  asleepNote,
  type BrowserJob,
  type JoinProgress,
  type LinkMeasure,
  type RankStatus,
  rejoinedNote,
} from '@webshard/trainer/browser';
import { byId, formatBytes, formatCount } from '../ui/format.js';
import { LiveChart } from '../ui/live-chart.js';
import {
  type Contribution,
  describeContribution,
  describeDownload,
  describeMemory,
  type TabMemory,
} from './join-progress.js';
import type { FromJoinWorker, JoinRequest } from './join-protocol.js';

const MARKUP = `
<section class="join">
  <h2>This tab is joining a webshard-train job</h2>
  <dl>
    <dt>status</dt><dd id="join-status">joining...</dd>
    <dt>this tab</dt><dd id="join-rank">-</dd>
    <dt>it computes</dt><dd id="join-work">-</dd>
    <dt>its link</dt><dd id="join-link">-</dd>
    <dt>the model</dt><dd id="join-download">-</dd>
    <dt>its share</dt><dd id="join-share">-</dd>
    <dt>it gave</dt><dd id="join-contribution">nothing yet</dd>
    <dt>its memory</dt><dd id="join-memory">-</dd>
    <dt>if it leaves</dt><dd id="join-leave-effect">-</dd>
  </dl>
  <p><button id="leave">leave the job</button></p>
  <figure id="chart-loss"></figure>
  <h2>the rank's output</h2>
  <pre id="join-log"></pre>
</section>`;

/** What join mode exposes for tests: `window.webshardJoin` (and `window.webshardRank`). */
export interface JoinState {
  status: RankStatus | { state: 'left' };
  job: BrowserJob | null;
  link: LinkMeasure | null;
  losses: number[];
  /** An elastic diloco world's newcomer: its download of the state (null: none). */
  download: JoinProgress | null;
  /** The share of each step's batch this tab trains on, as a fraction (null: not training). */
  share: number | null;
  contribution: Contribution;
  memory: TabMemory | null;
}

/**
 * [Note: the playground's join mode]
 * The address `webshard-train --browser-ranks` prints opens the playground (the Node process
 * serves its build, with `/job.json` and `/data` beside it: ranks/browser-job.ts in the trainer),
 * and the `#token=` in its fragment puts it in join mode. The rank runs in a worker
 * (./join-worker.ts: the trainer's `runBrowserRank`, the same loop as a Node rank), and the page
 * says who the tab is (rank and world), what it computes (from the job's strategy), how fast its
 * link to the job's host measured (a round trip and the data's download), its own loss as it
 * trains, and what leaving does. "Leave" ends the worker, which closes its connections as a closed
 * tab does: the job's strategies are not elastic for tabs, so the other ranks' next collective
 * fails naming this rank, and the job stops (resumable from its last checkpoint, the page says,
 * where it keeps them). A tab of an elastic world (`job.elastic`) says instead that the world goes
 * on without it, and what happens when it sleeps past the member timeout (dropped, then joined
 * again as a newcomer, which its rank then says). `window.webshardRank` is the status the trainer's own minimal page
 * reports, so the trainer's tab tests run either page.
 */
export function mountJoinView(root: HTMLElement, token: string): JoinState {
  root.innerHTML = MARKUP;
  const state: JoinState = {
    status: { state: 'joining' },
    job: null,
    link: null,
    losses: [],
    download: null,
    share: null,
    contribution: { steps: 0, tokens: 0 },
    memory: null,
  };
  const globals = window as { webshardRank?: RankStatus };
  const chart = new LiveChart(byId('chart-loss'), {
    title: "this rank's loss",
    yLabel: 'loss',
    series: [{ label: 'loss (this rank)', color: '#1f77b4' }],
  });
  const log = byId('join-log');
  const worker = new Worker(new URL('./join-worker.ts', import.meta.url), { type: 'module' });
  let rank: { rank: number; worldSize: number } | null = null;

  const show = (status: RankStatus | { state: 'left' }) => {
    state.status = status;
    if (status.state !== 'left') globals.webshardRank = status;
    byId('join-status').textContent = describeStatus(status);
    if (status.state === 'training') {
      rank = { rank: status.rank, worldSize: status.worldSize };
      const rejoined = rejoinedNote(status.elastic);
      byId('join-rank').textContent =
        `rank ${status.rank} of ${status.worldSize}${rejoined === null ? '' : `; ${rejoined}`}`;
    }
    if (status.state === 'done' || status.state === 'failed' || status.state === 'left') {
      byId<HTMLButtonElement>('leave').disabled = true;
    }
    if (state.job !== null && rank !== null) describeJob(state.job, rank);
  };

  const describeJob = (job: BrowserJob, where: { rank: number; worldSize: number }) => {
    state.share = 1 / where.worldSize;
    byId('join-share').textContent =
      `1/${where.worldSize} of each step's ${job.config.batchSize} windows of ${job.config.blockSize} tokens`;
    byId('join-work').textContent = describeWork(job, where.rank, where.worldSize);
    byId('join-leave-effect').textContent = leaveEffect(job, where.rank);
  };

  worker.onmessage = (event: MessageEvent<FromJoinWorker>) => {
    const message = event.data;
    if (message.type === 'status') show(message.status);
    else if (message.type === 'job') {
      state.job = message.job;
      state.link = message.link;
      byId('join-link').textContent = describeLink(message.link);
      if (state.download === null) {
        const elasticDiloco =
          message.job.elastic === true && message.job.config.strategy === 'diloco';
        byId('join-download').textContent = elasticDiloco
          ? 'the model comes from the members once this tab is admitted'
          : describeDownload(null);
      }
      if (rank !== null) describeJob(message.job, rank);
    } else if (message.type === 'download') {
      state.download = message.progress;
      byId('join-download').textContent = describeDownload(message.progress);
    } else if (message.type === 'line') {
      log.textContent = `${log.textContent ?? ''}${message.line}\n`
        .split('\n')
        .slice(-40)
        .join('\n');
    } else {
      state.losses.push(message.loss);
      const c = state.job?.config;
      state.contribution.steps += 1;
      if (c !== undefined)
        state.contribution.tokens += c.batchSize * c.blockSize * (state.share ?? 1);
      state.memory = {
        peakDeviceBytes: message.peakDeviceBytes,
        peakHostBytes: message.peakHostBytes,
      };
      byId('join-contribution').textContent = describeContribution(state.contribution);
      byId('join-memory').textContent = describeMemory(state.memory);
      chart.add(0, message.step, message.loss);
      byId('join-status').textContent =
        `training: step ${message.step}, loss ${message.loss.toFixed(4)}, ${formatCount(Math.round(message.tokensPerSecond))} tokens/s`;
    }
  };
  byId('leave').addEventListener('click', () => {
    worker.terminate();
    show({ state: 'left' });
  });
  const request: JoinRequest = { origin: location.origin, token };
  worker.postMessage(request);
  return state;
}

function describeStatus(status: RankStatus | { state: 'left' }): string {
  switch (status.state) {
    case 'joining':
      return 'joining the job...';
    case 'training':
      return `training as rank ${status.rank} of ${status.worldSize}: keep this tab open until the job ends`;
    case 'done':
      return `done: this tab trained ${status.losses.length} steps, last loss ${status.losses.at(-1)?.toFixed(4)}`;
    case 'failed':
      return `failed: ${status.error.name}: ${status.error.message}`;
    case 'left':
      return 'left the job (this tab trains no more)';
  }
}

/** What this rank does in each step of the job's strategy. */
export function describeWork(job: BrowserJob, rank: number, worldSize: number): string {
  const c = job.config;
  const rows = c.batchSize / worldSize;
  const model = `a GPT of ${c.nLayer} layers x ${c.nEmbd}`;
  const share = `its ${rows} of each step's ${c.batchSize} windows of ${c.blockSize} tokens`;
  switch (c.strategy) {
    case 'fsdp':
      return `${model}, fully sharded: this tab holds 1/${worldSize} of the parameters, gradients and AdamW state, gathers each unit's parameters for its forward and backward, and trains on ${share}`;
    case 'ddp':
      return `${model}, data parallel: a whole copy of the model, trained on ${share}; every gradient is all-reduced with the other ranks each step`;
    case 'diloco':
      return `${model}, DiLoCo: ${c.innerSteps} local AdamW steps on ${share}, then the pseudo-gradients are averaged with the other ranks (${c.outerCompression})`;
    default:
      return `${model} (${c.strategy}), rank ${rank}`;
  }
}

/** The link as measured: a round trip and the data's download. */
export function describeLink(link: LinkMeasure): string {
  const trip = `round trip ${link.roundTripMs.toFixed(1)} ms`;
  if (link.dataBytes === null || link.dataMs === null) return trip;
  const rate = (link.dataBytes / Math.max(link.dataMs, 0.1)) * 1000;
  return `${trip}; the data (${formatBytes(link.dataBytes)}) in ${link.dataMs.toFixed(0)} ms, ${formatBytes(rate)}/s`;
}

/** What happens to the job if this tab leaves. */
export function leaveEffect(job: BrowserJob, rank: number): string {
  if (job.elastic === true) {
    return `the world is elastic: it goes on without this tab, which may join again. ${asleepNote(job.memberTimeoutSeconds ?? null)}`;
  }
  const resume =
    job.config.checkpointDir === null
      ? 'the job keeps no checkpoints, so it would start again'
      : `it resumes from its last checkpoint with --resume ${job.config.checkpointDir}`;
  return `the job is not elastic for tabs: every other rank's next collective fails naming rank ${rank}, and the job stops (${resume})`;
}
