/**
 * A pending collective. Calls on one group run one after another in issue order, so work can be
 * issued early and awaited later (communication overlapping computation); awaiting handles out of
 * order is fine. A failed op rejects its handle with a `CollectiveError`; a handle nobody awaits
 * does not raise an unhandled rejection.
 */
export class Work<T = void> {
  /** Settles when the op has completed (or failed). */
  readonly promise: Promise<T>;
  private settled = false;

  constructor(
    readonly op: string,
    readonly seq: number,
    promise: Promise<T>,
  ) {
    this.promise = promise;
    promise.then(
      () => {
        this.settled = true;
      },
      () => {
        this.settled = true;
      },
    );
  }

  /** Wait for the op; rethrows its error. */
  wait(): Promise<T> {
    return this.promise;
  }

  /** Whether the op has finished, successfully or not. */
  get isCompleted(): boolean {
    return this.settled;
  }
}
