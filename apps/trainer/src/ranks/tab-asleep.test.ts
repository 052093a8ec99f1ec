import { expect, it } from 'vitest';
import { asleepNote, rejoinedNote } from './tab-asleep.js';

it('says what happens to a tab asleep past the member timeout, with the timeout when known', () => {
  expect(asleepNote(60)).toBe(
    "If this tab is frozen or asleep longer than the member timeout (60 s), the world drops it and goes on; when it wakes it joins again as a newcomer, with the world's state.",
  );
  expect(asleepNote(null)).toMatch(
    /^If this tab is frozen or asleep longer than the member timeout, /,
  );
});

it('says nothing of a rejoin until the tab was dropped, then names its new id and the count', () => {
  const tab = { id: 2, epoch: 0, rejoined: 0, memberTimeoutSeconds: 3 };
  expect(rejoinedNote(undefined)).toBeNull();
  expect(rejoinedNote(tab)).toBeNull();
  expect(rejoinedNote({ ...tab, id: 3, rejoined: 1 })).toBe(
    'it was dropped while frozen or asleep and joined again as a newcomer, member 3',
  );
  expect(rejoinedNote({ ...tab, id: 5, rejoined: 2 })).toBe(
    'it was dropped while frozen or asleep and joined again as a newcomer, member 5 (2 times)',
  );
});
