import { createCpuBackend, matmul, rand, type Tensor } from '@webshard/tensor-core';

type CpuBackend = ReturnType<typeof createCpuBackend>;

/**
 * [Note: stress pauses]
 * Between batches a rank computes, as a training step does between its collectives: synchronous
 * CPU matmuls of tensor-core, back to back until the pause is over, so the rank's event loop does
 * not turn (a shm barrier, a socket's data, a deadline's timer wait for it) while the matmul's
 * worker threads are busy too (`matmulThreads: 2`, whatever the core count; n x n products with
 * n >= 128 are 2^21 multiply-adds and up, which split across the threads, see [Note: matmul
 * threads] in tensor-core). `threadsInUse` tells whether they did. A pause shorter than one
 * product still runs one.
 */
export class BusyWork {
  private backend: CpuBackend | null = null;
  private a: Tensor | null = null;
  private b: Tensor | null = null;
  /** Products computed so far. */
  matmuls = 0;
  /** The most matmul threads seen in use. */
  threadsInUse = 1;

  /** `n`: the side of the square products; 0 spins without matmuls. */
  constructor(private readonly n: number) {}

  /** Computes synchronously for `ms` milliseconds. */
  run(ms: number): void {
    if (ms <= 0) return;
    const until = performance.now() + ms;
    if (this.n === 0) {
      while (performance.now() < until) {}
      return;
    }
    if (this.backend === null) {
      this.backend = createCpuBackend({ matmulThreads: 2 });
      this.a = rand([this.n, this.n], { backend: this.backend });
      this.b = rand([this.n, this.n], { backend: this.backend });
    }
    do {
      matmul(this.a!, this.b!).free();
      this.matmuls++;
      this.threadsInUse = Math.max(this.threadsInUse, this.backend.matmulThreadsInUse);
    } while (performance.now() < until);
  }

  dispose(): void {
    this.a?.free();
    this.b?.free();
    this.backend?.dispose();
    this.backend = null;
  }
}
