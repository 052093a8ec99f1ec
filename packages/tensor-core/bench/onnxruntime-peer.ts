// onnxruntime-node's CPU MatMul (MLAS) as the CPU matmul's second peer, measured in a child process
// of the bench's run (its WebGPU provider and the `webgpu` package cannot share a process,
// ANCHORS.md). onnxruntime-node is not a dependency of this repository (a 113 MB package of native
// binaries for every platform): the bench uses the one at `WEBSHARD_ONNXRUNTIME_NODE` (the package's
// directory) or one a user installed where this file resolves packages, and skips with a message
// otherwise. Run as a script, this file is the child: it prints one JSON line of median ms by size.
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';

/** Where onnxruntime-node is, or why not. */
export function findOnnxruntime(): { dir: string } | { skipped: string } {
  const set = process.env.WEBSHARD_ONNXRUNTIME_NODE;
  try {
    const main = createRequire(import.meta.url).resolve(set || 'onnxruntime-node');
    return { dir: main };
  } catch {
    return {
      skipped: set
        ? `WEBSHARD_ONNXRUNTIME_NODE=${set} is not an onnxruntime-node package directory`
        : 'onnxruntime-node is not installed (not a dependency: set WEBSHARD_ONNXRUNTIME_NODE to an install of it)',
    };
  }
}

// --- A one-node ONNX model, C = MatMul(A, B), as protobuf bytes (onnx.proto's field numbers). ---

function varint(value: number): number[] {
  const out: number[] = [];
  let v = value;
  while (v >= 0x80) {
    out.push((v & 0x7f) | 0x80);
    v = Math.floor(v / 128);
  }
  out.push(v);
  return out;
}
/** A varint field. */
const int = (field: number, value: number) => [...varint(field << 3), ...varint(value)];
/** A length-delimited field: a string or an embedded message. */
function bytes(field: number, value: number[] | string): number[] {
  const body = typeof value === 'string' ? [...new TextEncoder().encode(value)] : value;
  return [...varint((field << 3) | 2), ...varint(body.length), ...body];
}
/** ValueInfoProto of an f32 tensor `name` of shape [n, n]. */
function squareF32(name: string, n: number): number[] {
  const dim = bytes(1, int(1, n)); // TensorShapeProto.dim { dim_value }
  const tensorType = [...int(1, 1), ...bytes(2, [...dim, ...dim])]; // elem_type FLOAT, shape
  return [...bytes(1, name), ...bytes(2, bytes(1, tensorType))]; // name, type { tensor_type }
}

/** ModelProto bytes of C[n, n] = MatMul(A[n, n], B[n, n]), opset 13. */
export function matmulModel(n: number): Uint8Array {
  const node = [...bytes(1, 'A'), ...bytes(1, 'B'), ...bytes(2, 'C'), ...bytes(4, 'MatMul')];
  const graph = [
    ...bytes(1, node),
    ...bytes(2, 'matmul'),
    ...bytes(11, squareF32('A', n)),
    ...bytes(11, squareF32('B', n)),
    ...bytes(12, squareF32('C', n)),
  ];
  const opset = [...bytes(1, ''), ...int(2, 13)];
  return new Uint8Array([
    ...int(1, 8),
    ...bytes(2, 'webshard-bench'),
    ...bytes(7, graph),
    ...bytes(8, opset),
  ]);
}

/** A peer's medians, ms by matrix size, and its label; or why it was skipped. */
export type OnnxruntimeResult = { label: string; ms: Record<number, number> } | { skipped: string };

/**
 * Times onnxruntime-node's CPU MatMul at `sizes` in a child process, with as many intra-op threads as
 * the machine has cores (the CPU backend's matmul uses as many).
 */
export function onnxruntimeMatmulMs(sizes: number[]): OnnxruntimeResult {
  const found = findOnnxruntime();
  if ('skipped' in found) return found;
  try {
    const out = execFileSync(
      process.execPath,
      ['--import', 'tsx', fileURLToPath(import.meta.url), found.dir, sizes.join(',')],
      { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], timeout: 600_000 },
    );
    return JSON.parse(out.trim().split('\n').at(-1)!) as OnnxruntimeResult;
  } catch (error) {
    return { skipped: `onnxruntime-node failed: ${(error as Error).message.split('\n')[0]}` };
  }
}

/** The part of onnxruntime-node's API the child uses (the package is not a dependency). */
interface Ort {
  env: { versions: Record<string, string | undefined> };
  Tensor: new (type: 'float32', data: Float32Array, dims: number[]) => unknown;
  InferenceSession: {
    create(
      model: Uint8Array,
      options: {
        intraOpNumThreads: number;
        interOpNumThreads: number;
        executionProviders: string[];
      },
    ): Promise<{
      run(feeds: Record<string, unknown>): Promise<Record<string, { data: { length: number } }>>;
      release(): Promise<void>;
    }>;
  };
}

async function child(dir: string, sizes: number[]): Promise<void> {
  const ort = createRequire(import.meta.url)(dir) as Ort;
  const threads = availableParallelism();
  const ms: Record<number, number> = {};
  for (const n of sizes) {
    const session = await ort.InferenceSession.create(matmulModel(n), {
      intraOpNumThreads: threads,
      interOpNumThreads: 1,
      executionProviders: ['cpu'],
    });
    const data = () => Float32Array.from({ length: n * n }, () => Math.random() * 2 - 1);
    const feeds = {
      A: new ort.Tensor('float32', data(), [n, n]),
      B: new ort.Tensor('float32', data(), [n, n]),
    };
    const times: number[] = [];
    const rounds = n >= 1024 ? 9 : 15;
    for (let i = 0; i < rounds + 2; i++) {
      const t0 = performance.now();
      const { C } = await session.run(feeds);
      if (C!.data.length !== n * n) throw new Error(`MatMul gave ${C!.data.length} elements`);
      if (i >= 2) times.push(performance.now() - t0);
    }
    await session.release();
    times.sort((a, b) => a - b);
    ms[n] = times[times.length >> 1]!;
  }
  const version = ort.env.versions.node ?? '?';
  console.log(
    JSON.stringify({ label: `onnxruntime-node ${version} CPU (MLAS, ${threads} threads)`, ms }),
  );
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  await child(process.argv[2]!, process.argv[3]!.split(',').map(Number));
}
