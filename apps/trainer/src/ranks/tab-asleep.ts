// What a page says about an elastic world's tab that sleeps ([Note: liveness in an elastic world]
// in collectives): the trainer's minimal page (./browser-page.ts) and the playground's join mode
// both show these words.
import type { ElasticTabStatus } from './browser-rank.js';

/** What happens when the tab is frozen or asleep past the coordinator's member timeout. */
export function asleepNote(memberTimeoutSeconds: number | null): string {
  const timeout =
    memberTimeoutSeconds === null
      ? 'the member timeout'
      : `the member timeout (${memberTimeoutSeconds} s)`;
  return `If this tab is frozen or asleep longer than ${timeout}, the world drops it and goes on; when it wakes it joins again as a newcomer, with the world's state.`;
}

/** That the tab was dropped and joined again, or null when it never was. */
export function rejoinedNote(elastic: ElasticTabStatus | undefined): string | null {
  if (elastic === undefined || elastic.rejoined === 0) return null;
  const times = elastic.rejoined === 1 ? '' : ` (${elastic.rejoined} times)`;
  return `it was dropped while frozen or asleep and joined again as a newcomer, member ${elastic.id}${times}`;
}
