import type { BrowserJob, JoinProgress, LinkMeasure, RankStatus } from '@webshard/trainer/browser';

/** What the page posts to its join worker: where the job is, and the token of its link. */
export interface JoinRequest {
  origin: string;
  token: string;
}

/** What the join worker tells the page. */
export type FromJoinWorker =
  | { type: 'status'; status: RankStatus }
  | { type: 'job'; job: BrowserJob; link: LinkMeasure }
  | { type: 'line'; line: string }
  | { type: 'download'; progress: JoinProgress }
  | {
      type: 'step';
      step: number;
      loss: number;
      ms: number;
      tokensPerSecond: number;
      peakDeviceBytes: number;
      peakHostBytes: number | null;
    };
