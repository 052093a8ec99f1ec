// The page a user opens to add a browser tab as a rank of a `webshard-train --browser-ranks` run,
// when the playground (apps/playground, whose join mode shows more) is not built. Bundled for the
// browser (ranks/page-bundle.ts) and served by the Node process that started the run
// (ranks/browser-job.ts); it runs the same rank loop as a Node rank, train.ts.
import type { StepRecord } from '../progress.js';
import type { JoinProgress } from '../run/elastic-join.js';
import { type RankStatus, runBrowserRank } from './browser-rank.js';
import { asleepNote, rejoinedNote } from './tab-asleep.js';

export type { JoinProgress } from '../run/elastic-join.js';
export type { BrowserJob, RankStatus } from './browser-rank.js';

/** The page's text for a status. */
function describe(status: RankStatus): string {
  switch (status.state) {
    case 'joining':
      return 'joining the run...';
    case 'training': {
      const training = `training as rank ${status.rank} of ${status.worldSize} (keep this tab open until the run ends)`;
      const rejoined = rejoinedNote(status.elastic);
      return rejoined === null ? training : `${training}; ${rejoined}`;
    }
    case 'done':
      return `done: rank ${status.rank} trained ${status.losses.length} steps, loss ${status.losses.at(-1)?.toFixed(4)}`;
    case 'failed':
      return `failed: ${status.error.name}: ${status.error.message}`;
  }
}

const globals = globalThis as {
  webshardRank?: RankStatus;
  webshardDownload?: JoinProgress;
  webshardSteps?: StepRecord[];
  document?: Document;
};
if (globals.document !== undefined) {
  const token = new URLSearchParams(location.hash.slice(1)).get('token') ?? '';
  void runBrowserRank(location.origin, token, {
    report: (status) => {
      globals.webshardRank = status;
      const line = document.getElementById('status');
      if (line !== null) line.textContent = describe(status);
      const note = document.getElementById('asleep');
      // An elastic world's tab: what happens when it sleeps.
      if (note !== null && status.state === 'training' && status.elastic !== undefined) {
        note.textContent = asleepNote(status.elastic.memberTimeoutSeconds);
      }
    },
    say: (line) => console.log(line),
    // This tab's own steps (its loss, time and memory), for the tests and bench:volunteers.
    step: (record) => {
      globals.webshardSteps ??= [];
      globals.webshardSteps.push(record);
    },
    // A diloco newcomer's download of the world's state, for the tests (`window.webshardDownload`).
    join: (progress) => {
      globals.webshardDownload = progress;
      const line = document.getElementById('status');
      if (line !== null && !progress.done) {
        line.textContent = `downloading the model: ${progress.receivedBytes} of ${progress.totalBytes} bytes in ${progress.seconds.toFixed(1)} s from ${progress.senders} member(s)`;
      }
    },
  });
}
