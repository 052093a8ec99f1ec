// The page a user opens to add a browser tab as a rank of a `webshard-train --browser-ranks` run.
// Bundled for the browser (ranks/page-bundle.ts) and served by the Node process that started the
// run (ranks/browser-job.ts); it runs the same rank loop as a Node rank, train.ts.
import { connectBrowserRank } from '@webshard/collectives';
import { chooseBackend } from '../backend-choice.js';
import type { TrainConfig } from '../config.js';
import { datasetFromBytes } from '../data/dataset.js';
import { Gpt2Tokenizer } from '../data/gpt2-tokenizer.js';
import { train } from '../train.js';

/** What the Node process serves at `/job.json`: the run's flags and where its store is. */
export interface BrowserJob {
  config: TrainConfig;
  /** The join URL of `connectBrowserRank` (the token is in the page's fragment, not here). */
  join: string;
}

/** Where the tab is, for the page's text and for tests (`window.webshardRank`). */
export type RankStatus =
  | { state: 'joining' }
  | { state: 'training'; rank: number; worldSize: number }
  | { state: 'done'; rank: number; losses: number[] }
  | { state: 'failed'; error: { name: string; message: string } };

/**
 * Joins the run this page was served by and trains as one of its ranks until the run ends. The
 * token comes from the page's fragment (`#token=...`), which the browser never sends to a server;
 * the rank, world size and store address from the job and the store (see [Note: joining a job as
 * a browser rank] in @webshard/collectives).
 */
export async function runBrowserRank(report: (status: RankStatus) => void): Promise<void> {
  try {
    report({ state: 'joining' });
    const token = new URLSearchParams(location.hash.slice(1)).get('token') ?? '';
    const job = (await (await fetch('/job.json')).json()) as BrowserJob;
    const { group, rank, worldSize } = await connectBrowserRank({ url: job.join, token });
    report({ state: 'training', rank, worldSize });
    try {
      const summary = await train(
        job.config,
        {
          stdout: (text) => console.log(text.trimEnd()),
          isTTY: false,
          createBackend: (config, vocabSize) =>
            chooseBackend(config, vocabSize, (text) => console.log(text.trimEnd())),
          loadData: async (path, blockSize, tokenizer) => {
            const response = await fetch('/data');
            if (!response.ok) throw new Error(`GET /data: ${response.status}`);
            const bytes = new Uint8Array(await response.arrayBuffer());
            const gpt2 = tokenizer === 'gpt2' ? await Gpt2Tokenizer.load() : null;
            return datasetFromBytes(bytes, path, blockSize, gpt2);
          },
        },
        group,
      );
      report({ state: 'done', rank, losses: summary.records.map((r) => r.loss) });
    } catch (error) {
      group.abort(`rank ${rank} failed: ${(error as Error).message}`);
      throw error;
    } finally {
      await group.close();
    }
  } catch (error) {
    const { name, message } = error as Error;
    report({ state: 'failed', error: { name, message } });
  }
}

/** The page's text for a status. */
function describe(status: RankStatus): string {
  switch (status.state) {
    case 'joining':
      return 'joining the run...';
    case 'training':
      return `training as rank ${status.rank} of ${status.worldSize} (keep this tab open until the run ends)`;
    case 'done':
      return `done: rank ${status.rank} trained ${status.losses.length} steps, loss ${status.losses.at(-1)?.toFixed(4)}`;
    case 'failed':
      return `failed: ${status.error.name}: ${status.error.message}`;
  }
}

const globals = globalThis as { webshardRank?: RankStatus; document?: Document };
if (globals.document !== undefined) {
  void runBrowserRank((status) => {
    globals.webshardRank = status;
    const line = document.getElementById('status');
    if (line !== null) line.textContent = describe(status);
  });
}
