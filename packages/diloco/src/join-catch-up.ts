import type { DiLoCo } from './diloco.js';
import type { DilocoStateDict, OuterSyncStats } from './diloco-types.js';
import { DilocoStateError } from './errors.js';

/*
 * [Note: catching up a join]
 * A newcomer's download ([Note: a compressed join]) takes minutes over a home link, longer than
 * the members' inner phase: the members must not wait for it. So the state a newcomer downloads is
 * the world's at its admission (a snapshot every sender holds still), and the world trains on:
 * at every outer sync while the download runs, the newcomer takes part in the average with weight
 * 0 (it adds nothing, the members' weights count the contributors only) and keeps the averaged
 * pseudo-gradient instead of applying it (`outerSync({ missed })`). Once the snapshot is in, it
 * loads it and applies the kept averages in order (`DiLoCo.applyAverage`): the outer optimizer is
 * the same code on the same bits, so its global copy and momentum are then the members' bit for
 * bit. It costs the newcomer one f32 copy of the parameters per sync it missed (its memory, not
 * the link); the members pay nothing but the bandwidth of the slices they send.
 */

/** A newcomer's outer syncs while its state downloads, replayed once it is in. */
export class JoinCatchUp {
  private readonly missed: Float32Array[] = [];
  private done = false;

  constructor(private readonly diloco: DiLoCo) {}

  private taken = 0;

  /** Outer syncs taken part in (weight 0) while the state downloaded (replayed once it is in). */
  get syncs(): number {
    return this.taken;
  }

  /** One outer sync with the others while the state downloads: weight 0, the average kept. */
  async outerSync(): Promise<OuterSyncStats> {
    this.assertOpen('outerSync');
    const stats = await this.diloco.outerSync({ weight: 0, missed: this.missed });
    this.taken += 1;
    return stats;
  }

  /**
   * Loads the downloaded `state` (the world's at admission) and applies every kept average in
   * order: the global copy, momentum and outer step count are then the world's, the inner step
   * count as if every missed sync ended `innerSteps` inner steps. Call once.
   */
  async finish(state: DilocoStateDict): Promise<void> {
    this.assertOpen('finish');
    this.done = true;
    const innerStep = state.innerStep + this.missed.length * this.diloco.options.innerSteps;
    await this.diloco.loadStateDict({ ...state, innerStep });
    for (const averaged of this.missed.splice(0)) await this.diloco.applyAverage(averaged);
  }

  private assertOpen(op: string): void {
    if (this.done) {
      throw new DilocoStateError(
        { op, rank: this.diloco.group.rank },
        this.diloco.state,
        'this join caught up already',
      );
    }
  }
}
