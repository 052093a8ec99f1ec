// The rank a tab adds to a `webshard-train --browser-ranks` job, in a worker so the page stays
// responsive ([Note: the playground's join mode]). Closing the worker leaves the job.
import { runBrowserRank } from '@webshard/trainer/browser';
import type { FromJoinWorker, JoinRequest } from './join-protocol.js';

const post = (message: FromJoinWorker) => (self as unknown as Worker).postMessage(message);

self.onmessage = (event: MessageEvent<JoinRequest>) => {
  const { origin, token } = event.data;
  void runBrowserRank(origin, token, {
    report: (status) => post({ type: 'status', status }),
    say: (line) => post({ type: 'line', line }),
    job: (job, link) => post({ type: 'job', job, link }),
    step: (record) =>
      post({
        type: 'step',
        step: record.step,
        loss: record.loss,
        ms: record.ms,
        tokensPerSecond: record.tokensPerSecond,
        peakDeviceBytes: record.peakDeviceBytes,
        peakHostBytes: record.peakHostBytes ?? null,
      }),
    join: (progress) => post({ type: 'download', progress }),
  });
};
