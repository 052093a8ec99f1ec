/*
 * [Note: the step profile]
 * Where a training step's time goes, by kernel: `profileKernels` wraps a tensor-core `Backend` in a
 * proxy that times every kernel call (the calls a CPU backend makes run to completion before they
 * return, so the time of the call is the kernel's), sorts it into a category (matmul, attention,
 * softmax, layer norm, GELU, embedding, loss, optimizer, element-wise, reductions, copies,
 * allocation) and counts its work: FLOPs for the matmuls (2 M N K a batch), bytes read and written
 * for the rest (every operand's elements once). What no kernel accounts for, autograd and the ops
 * layer's JavaScript, is the step's time less the kernels'. Asynchronous methods (`read`, `sync`)
 * count their synchronous part only. Methods are called on the backend itself, not the proxy, so a
 * kernel that calls another is timed once, as the outer kernel. Types are structural: this package
 * depends on no workspace package.
 *
 * Categories that only a GPT's structure tells apart, given its sequence length T: a matmul with a
 * T x T matrix among its operands or its output is attention's (the scores, the value product and
 * their four gradients; the linear layers' operands are T x C, C x C' and their weight gradients
 * C x C', so a model with C = T would need another rule), and `where` is attention's causal mask
 * (the one `maskedFill` a GPT step calls). Without T, no matmul is attention's.
 */

/** A kernel operand as tensor-core passes it: only what the profile reads. */
interface Operand {
  readonly shape: readonly number[];
  readonly dtype: string;
}

/** The categories of the step profile, in the order the table prints them. */
export const PROFILE_CATEGORIES = [
  'matmul',
  'attention',
  'softmax',
  'layer norm',
  'GELU',
  'embedding',
  'loss',
  'optimizer',
  'element-wise',
  'reductions',
  'copies',
  'allocation',
  'other',
] as const;

export type ProfileCategory = (typeof PROFILE_CATEGORIES)[number];

/** One kernel call's category and work. */
export interface KernelWork {
  category: ProfileCategory;
  /** Floating point operations (matmuls), else 0. */
  flops: number;
  /** Bytes of every tensor operand, read or written, once each. */
  bytes: number;
}

const DTYPE_BYTES: Record<string, number> = { f64: 8, f32: 4, i32: 4, f16: 2, bf16: 2 };

function isOperand(value: unknown): value is Operand {
  return (
    typeof value === 'object' &&
    value !== null &&
    Array.isArray((value as Operand).shape) &&
    typeof (value as Operand).dtype === 'string'
  );
}

function elements(operand: Operand): number {
  return operand.shape.reduce((a, b) => a * b, 1);
}

function operandBytes(args: readonly unknown[]): number {
  let bytes = 0;
  for (const arg of args) {
    if (isOperand(arg)) bytes += elements(arg) * (DTYPE_BYTES[arg.dtype] ?? 4);
  }
  return bytes;
}

const GELU_OPS = new Set(['gelu', 'geluTanh', 'geluGrad', 'geluTanhGrad']);
const CATEGORY_OF: Record<string, ProfileCategory> = {
  softmax: 'softmax',
  layerNorm: 'layer norm',
  layerNormBackward: 'layer norm',
  gather: 'embedding',
  scatterAdd: 'embedding',
  crossEntropy: 'loss',
  crossEntropyBackward: 'loss',
  adam: 'optimizer',
  sgd: 'optimizer',
  axpy: 'element-wise',
  reduce: 'reductions',
  checkFinite: 'reductions',
  copy: 'copies',
  copyStrided: 'copies',
  cast: 'copies',
  fill: 'copies',
  write: 'copies',
  read: 'copies',
  allocate: 'allocation',
  release: 'allocation',
  emptyCache: 'allocation',
  where: 'attention',
  randomUniform: 'other',
  randomNormal: 'other',
};

/** The methods of a backend that the profile times: its kernels, transfers and memory. */
export const PROFILED_METHODS = new Set([...Object.keys(CATEGORY_OF), 'unary', 'binary', 'matmul']);

/**
 * A kernel call's category and work, from the method's name and arguments as tensor-core's
 * `Backend` takes them ([Note: the step profile]).
 */
export function kernelWork(
  method: string,
  args: readonly unknown[],
  sequenceLength?: number,
): KernelWork {
  const bytes = operandBytes(args);
  if (method === 'matmul') {
    const [a, b, out, transposeA] = args as [Operand, Operand, Operand, boolean];
    const [batch = 1, m = 1, n = 1] = out.shape;
    const k = (transposeA ? a.shape[1] : a.shape[2]) ?? 1;
    const square = (t: Operand) => t.shape[1] === sequenceLength && t.shape[2] === sequenceLength;
    const attention = sequenceLength !== undefined && (square(a) || square(b) || square(out));
    return { category: attention ? 'attention' : 'matmul', flops: 2 * batch * m * n * k, bytes };
  }
  if (method === 'unary' || method === 'binary') {
    const op = args[0] as string;
    return { category: GELU_OPS.has(op) ? 'GELU' : 'element-wise', flops: 0, bytes };
  }
  return { category: CATEGORY_OF[method] ?? 'other', flops: 0, bytes };
}

/** A kernel call's key in `KernelProfile.kernels`: method, op (unary, binary) and shapes. */
export function kernelKey(method: string, args: readonly unknown[]): string {
  const op = method === 'unary' || method === 'binary' ? ` ${String(args[0])}` : '';
  const shapes = args.filter(isOperand).map((o) => `[${o.shape.join(', ')}]`);
  return `${method}${op} ${shapes.join(' ')}`.trim();
}

/** What the profile summed for one category. */
export interface CategoryTotals {
  calls: number;
  ms: number;
  flops: number;
  bytes: number;
}

/** The running totals of a profiled backend; `reset` between warm-up and the measured steps. */
export class KernelProfile {
  readonly totals = new Map<ProfileCategory, CategoryTotals>();
  /** Calls and milliseconds by kernel: method, op and operand shapes (`kernelKey`). */
  readonly kernels = new Map<string, { calls: number; ms: number }>();

  add(work: KernelWork, ms: number, key?: string): void {
    if (key !== undefined) {
      const kernel = this.kernels.get(key) ?? { calls: 0, ms: 0 };
      kernel.calls += 1;
      kernel.ms += ms;
      this.kernels.set(key, kernel);
    }
    const total = this.totals.get(work.category) ?? { calls: 0, ms: 0, flops: 0, bytes: 0 };
    total.calls += 1;
    total.ms += ms;
    total.flops += work.flops;
    total.bytes += work.bytes;
    this.totals.set(work.category, total);
  }

  reset(): void {
    this.totals.clear();
    this.kernels.clear();
  }

  /** The `count` kernels that took longest, as a Markdown table (per step: over `steps`). */
  topKernels(count: number, steps: number): string {
    const rows = [...this.kernels].sort((a, b) => b[1].ms - a[1].ms).slice(0, count);
    return [
      '| kernel (method, op, operand shapes) | calls a step | ms a step |',
      '| --- | --- | --- |',
      ...rows.map(
        ([key, k]) => `| ${key} | ${(k.calls / steps).toFixed(0)} | ${(k.ms / steps).toFixed(2)} |`,
      ),
    ].join('\n');
  }

  /** Milliseconds in kernels, all categories. */
  kernelMs(): number {
    let ms = 0;
    for (const total of this.totals.values()) ms += total.ms;
    return ms;
  }
}

/** How `profileKernels` sorts and times. */
export interface ProfileOptions {
  /** The model's sequence length T, which tells attention's matmuls from the linear layers'. */
  sequenceLength?: number;
  /** The clock, in milliseconds (tests pass their own). */
  now?: () => number;
}

/**
 * `backend` behind a proxy that times its kernels into a `KernelProfile` ([Note: the step
 * profile]). Use the proxy everywhere the backend would be (models, tensors, optimizer), so that
 * every kernel goes through it.
 */
export function profileKernels<T extends object>(
  backend: T,
  options: ProfileOptions = {},
): { backend: T; profile: KernelProfile } {
  const { sequenceLength, now = () => performance.now() } = options;
  const profile = new KernelProfile();
  const proxy = new Proxy(backend, {
    get(target, property) {
      const value = Reflect.get(target, property, target) as unknown;
      if (typeof value !== 'function') return value;
      const method = value as (...args: unknown[]) => unknown;
      if (typeof property !== 'string' || !PROFILED_METHODS.has(property)) {
        return (...args: unknown[]) => method.apply(target, args);
      }
      return (...args: unknown[]) => {
        const start = now();
        const result = method.apply(target, args);
        profile.add(
          kernelWork(property, args, sequenceLength),
          now() - start,
          kernelKey(property, args),
        );
        return result;
      };
    },
  });
  return { backend: proxy, profile };
}

/** The machine's ceilings the table compares with, where measured. */
export interface ProfileCeilings {
  /** f32 arithmetic, GFLOP/s (the WebAssembly SIMD one, on the threads a matmul uses). */
  gflops?: number;
  /** Memory bandwidth, GB/s, bytes read plus bytes written as the profile counts them. */
  gbPerS?: number;
}

function fixed(value: number, digits: number): string {
  return Number.isFinite(value) ? value.toFixed(digits) : '-';
}

/**
 * The profile as a Markdown table: per category its calls and milliseconds per step, its share of
 * the step, and its GFLOP/s (matmuls) or GB/s (the rest) with the share of the ceiling; then the
 * time outside kernels. `steps` is how many steps the totals cover.
 */
export function formatProfile(
  profile: KernelProfile,
  stepMs: number,
  steps: number,
  ceilings: ProfileCeilings = {},
): string {
  const lines = [
    '| part of the step | calls | ms a step | share | rate | of the ceiling |',
    '| --- | --- | --- | --- | --- | --- |',
  ];
  for (const category of PROFILE_CATEGORIES) {
    const total = profile.totals.get(category);
    if (total === undefined) continue;
    const ms = total.ms / steps;
    const seconds = total.ms / 1000;
    let rate = '-';
    let ofCeiling = '-';
    if (total.flops > 0) {
      const gflops = total.flops / seconds / 1e9;
      rate = `${fixed(gflops, 1)} GFLOP/s`;
      if (ceilings.gflops) ofCeiling = `${fixed((100 * gflops) / ceilings.gflops, 0)} %`;
    } else if (total.bytes > 0 && category !== 'allocation') {
      const gb = total.bytes / seconds / 1e9;
      rate = `${fixed(gb, 2)} GB/s`;
      if (ceilings.gbPerS) ofCeiling = `${fixed((100 * gb) / ceilings.gbPerS, 0)} %`;
    }
    lines.push(
      `| ${category} | ${Math.round(total.calls / steps)} | ${fixed(ms, 2)} | ${fixed((100 * ms) / stepMs, 1)} % | ${rate} | ${ofCeiling} |`,
    );
  }
  const outside = stepMs - profile.kernelMs() / steps;
  lines.push(
    `| outside kernels (autograd, ops layer, JavaScript) | - | ${fixed(outside, 2)} | ${fixed((100 * outside) / stepMs, 1)} % | - | - |`,
    `| the step | - | ${fixed(stepMs, 2)} | 100 % | - | - |`,
  );
  return lines.join('\n');
}
