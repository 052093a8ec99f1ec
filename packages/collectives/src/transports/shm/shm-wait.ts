/** `Atomics.waitAsync` (Node 16+, ES2024; the repo's lib is ES2023). */
export const waitAsync = (
  Atomics as unknown as {
    waitAsync(
      words: Int32Array,
      index: number,
      value: number,
    ): { async: false; value: string } | { async: true; value: Promise<string> };
  }
).waitAsync;
