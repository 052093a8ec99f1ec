// One browser tab's rank of a `webshard-train --browser-ranks` run, without a page: the trainer's
// own page (./browser-page.ts) and the playground's join mode (apps/playground) both run it, the
// latter in a worker so the page stays responsive.
import { connectBrowserRank } from '@webshard/collectives';
import { chooseBackend } from '../backend-choice.js';
import type { TrainConfig } from '../config.js';
import { datasetFromBytes } from '../data/dataset.js';
import { Gpt2Tokenizer } from '../data/gpt2-tokenizer.js';
import type { StepRecord } from '../progress.js';
import type { RunIO } from '../run/run-io.js';
import type { JoinProgress } from '../run/elastic-join.js';
import { trainElastic } from '../run/elastic-run.js';
import { train } from '../train.js';

/** What the Node process serves at `/job.json`: the run's flags and where its store is. */
export interface BrowserJob {
  config: TrainConfig;
  /** The join URL of `connectBrowserRank` (the token is in the page's fragment, not here). */
  join: string;
  /**
   * `join` is an elastic world's coordinator: the tab joins it as a member (`trainElastic`)
   * instead of taking a fixed rank ([Note: browser tabs in an elastic world]).
   */
  elastic?: boolean;
  /**
   * `elastic` only: the coordinator's `--member-timeout`, in seconds: a tab frozen or asleep that
   * long is dropped ([Note: liveness in an elastic world] in collectives).
   */
  memberTimeoutSeconds?: number;
  /** `elastic` only: the simulated link between members (the coordinator's `WEBSHARD_LINK`). */
  link?: string;
}

/**
 * A tab in an elastic world, for its page: who it is now, and whether it was dropped (frozen or
 * asleep past the member timeout) and joined again as a newcomer.
 */
export interface ElasticTabStatus {
  /** The coordinator's id of this tab: a new one each time it joins again. */
  id: number;
  /** The epoch it trains in. */
  epoch: number;
  /** How many times the world dropped this tab and it joined again as a newcomer. */
  rejoined: number;
  /** The coordinator's member timeout in seconds (null: not told). */
  memberTimeoutSeconds: number | null;
}

/** Where the tab is, for the page's text and for tests (`window.webshardRank`). */
export type RankStatus =
  | { state: 'joining' }
  | { state: 'training'; rank: number; worldSize: number; elastic?: ElasticTabStatus }
  | { state: 'done'; rank: number; losses: number[] }
  | { state: 'failed'; error: { name: string; message: string } };

/** What a rank tells its page besides its status: the run's lines, and the link it measured. */
export interface BrowserRankHooks {
  /** Every status change. */
  report(status: RankStatus): void;
  /** The run's output lines (its progress and what it chose), as a Node rank prints them. */
  say?(line: string): void;
  /** The job, once fetched, and how fast its data came (bytes over milliseconds, and a round trip). */
  job?(job: BrowserJob, link: LinkMeasure): void;
  /** Each step this rank took, with its own loss and time. */
  step?(record: StepRecord): void;
  /**
   * An elastic diloco world's newcomer: its download of the world's state, after every chunk and
   * once done ([Note: a diloco join that does not stop the world]).
   */
  join?(progress: JoinProgress): void;
}

/** The tab's link to the Node process that serves the job, as the page measured it. */
export interface LinkMeasure {
  /** Milliseconds of one small request and its answer (`/job.json`). */
  roundTripMs: number;
  /** Bytes of the data file and the milliseconds its download took (null: no data file). */
  dataBytes: number | null;
  dataMs: number | null;
}

/**
 * Joins the run at `origin` (the page's own origin: the Node process serves the page, `/job.json`
 * and `/data`) with `token` (from the page's fragment, which the browser never sends to a server)
 * and trains as one of its ranks until the run ends. The rank, world size and store address come
 * from the job and the store (see [Note: joining a job as a browser rank] in @webshard/collectives).
 * Never throws: a failure is the `failed` status.
 */
export async function runBrowserRank(
  origin: string,
  token: string,
  hooks: BrowserRankHooks,
): Promise<void> {
  const say = (text: string) => hooks.say?.(text.trimEnd());
  try {
    hooks.report({ state: 'joining' });
    const asked = performance.now();
    const job = (await (await fetch(new URL('/job.json', origin))).json()) as BrowserJob;
    const link: LinkMeasure = {
      roundTripMs: performance.now() - asked,
      dataBytes: null,
      dataMs: null,
    };
    const io: RunIO = {
      stdout: say,
      isTTY: false,
      ...(hooks.step === undefined ? {} : { onStep: hooks.step }),
      createBackend: (config, vocabSize) => chooseBackend(config, vocabSize, say),
      loadData: async (path, blockSize, tokenizer) => {
        const started = performance.now();
        const response = await fetch(new URL('/data', origin));
        if (!response.ok) throw new Error(`GET /data: ${response.status}`);
        const bytes = new Uint8Array(await response.arrayBuffer());
        link.dataBytes = bytes.byteLength;
        link.dataMs = performance.now() - started;
        hooks.job?.(job, link);
        const gpt2 = tokenizer === 'gpt2' ? await Gpt2Tokenizer.load() : null;
        return datasetFromBytes(bytes, path, blockSize, gpt2);
      },
    };
    if (job.elastic === true) {
      await runElasticMember(job, token, io, hooks);
      return;
    }
    const { group, rank, worldSize } = await connectBrowserRank({ url: job.join, token });
    hooks.report({ state: 'training', rank, worldSize });
    try {
      const summary = await train(job.config, io, group);
      hooks.report({ state: 'done', rank, losses: summary.records.map((r) => r.loss) });
    } catch (error) {
      group.abort(`rank ${rank} failed: ${(error as Error).message}`);
      throw error;
    } finally {
      await group.close();
    }
  } catch (error) {
    const { name, message } = error as Error;
    hooks.report({ state: 'failed', error: { name, message } });
  }
}

/**
 * The tab as a member of an elastic world (`job.elastic`): `trainElastic` over `ws`, its rank
 * whatever each epoch gives it; the status follows every epoch, and counts the times the tab was
 * dropped (frozen or asleep past the member timeout) and joined again as a newcomer.
 */
async function runElasticMember(
  job: BrowserJob,
  token: string,
  io: RunIO,
  hooks: BrowserRankHooks,
): Promise<void> {
  let rejoined = 0;
  const summary = await trainElastic({ ...job.config, elastic: job.join, transport: 'ws' }, io, {
    token,
    name: 'browser tab',
    ...(job.link === undefined ? {} : { link: job.link }),
    ...(hooks.join === undefined ? {} : { joinProgress: hooks.join }),
    admitted: (rank, worldSize) => hooks.report({ state: 'training', rank, worldSize }),
    changed: (change) => {
      if (change.rejoined === true) rejoined += 1;
      const { id, epoch, rank, worldSize } = change;
      const memberTimeoutSeconds = job.memberTimeoutSeconds ?? null;
      hooks.report({
        state: 'training',
        rank,
        worldSize,
        elastic: { id, epoch, rejoined, memberTimeoutSeconds },
      });
    },
  });
  hooks.report({
    state: 'done',
    rank: summary.rank ?? 0,
    losses: summary.records.map((r) => r.loss),
  });
}
