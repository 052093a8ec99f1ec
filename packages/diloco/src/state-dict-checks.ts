import type { DilocoStateDict } from './diloco-types.js';
import { DilocoStateError } from './errors.js';

/**
 * Refuse a state dict that does not fit `n` parameters, with a `DilocoStateError` naming the
 * field, before `loadStateDict` changes anything.
 */
export function checkStateDict(state: DilocoStateDict, n: number, rank: number): void {
  const bad = (what: string, length: number | undefined) =>
    new DilocoStateError(
      { op: 'loadStateDict', rank },
      'idle',
      `${what} has ${length} elements, the wrapped parameters ${n}`,
    );
  if (state.global?.length !== n) throw bad('global', state.global?.length);
  if (state.momentumBuffer !== null && state.momentumBuffer.length !== n) {
    throw bad('momentumBuffer', state.momentumBuffer.length);
  }
  if (state.residual !== null && state.residual.length !== n) {
    throw bad('residual', state.residual.length);
  }
  if (!Number.isSafeInteger(state.innerStep) || state.innerStep < 0) {
    throw new DilocoStateError(
      { op: 'loadStateDict', rank },
      'idle',
      `innerStep must be a whole number >= 0, got ${state.innerStep}`,
    );
  }
}
