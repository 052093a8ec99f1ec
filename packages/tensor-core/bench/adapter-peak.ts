/**
 * What an adapter's arithmetic allows a matmul at most: a compute shader that only multiplies and
 * adds in registers (no memory traffic but one store per invocation), as many f32 operations per
 * invocation as a register-tiled matmul's inner loop, over enough invocations to fill every core.
 * On a CPU adapter (lavapipe, SwiftShader) this is the ceiling the shader compiler gives a matmul
 * kernel on this machine; a matmul's GFLOP/s divided by it is how much of that ceiling it reaches.
 */
import { BufferUsage } from '../src/backend/webgpu/gpu-runtime.js';

// 8 independent vec4 chains a = a * m + c per step: 64 f32 operations per step, in the same
// dependency shape as a matmul's 8 vec4 accumulators. The multiplier and addend come from a
// buffer so the compiler cannot fold the loop.
const SHADER = /* wgsl */ `
struct Params { m: vec4f, c: vec4f, steps: u32 }
@group(0) @binding(0) var<storage, read> params: Params;
@group(0) @binding(1) var<storage, read_write> out: array<vec4f>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3u) {
  let seed = f32(id.x) * 1e-7;
  var a0 = vec4f(seed); var a1 = a0 + 1.0; var a2 = a0 + 2.0; var a3 = a0 + 3.0;
  var a4 = a0 + 4.0; var a5 = a0 + 5.0; var a6 = a0 + 6.0; var a7 = a0 + 7.0;
  let m = params.m;
  let c = params.c;
  for (var i = 0u; i < params.steps; i++) {
    a0 = a0 * m + c; a1 = a1 * m + c; a2 = a2 * m + c; a3 = a3 * m + c;
    a4 = a4 * m + c; a5 = a5 * m + c; a6 = a6 * m + c; a7 = a7 * m + c;
  }
  out[id.x] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
}
`;

const FLOPS_PER_STEP = 8 * 4 * 2;

/** The median GFLOP/s of the register-only shader on `device`, over `rounds` timed dispatches. */
export async function arithmeticPeakGflops(
  device: GPUDevice,
  { workgroups = 512, steps = 4096, rounds = 5 } = {},
): Promise<number> {
  const invocations = workgroups * 64;
  const module = device.createShaderModule({ code: SHADER });
  const pipeline = await device.createComputePipelineAsync({
    layout: 'auto',
    compute: { module, entryPoint: 'main' },
  });
  // Params: two vec4f and a u32, padded to 48 bytes.
  const paramsBuffer = device.createBuffer({
    size: 48,
    usage: BufferUsage.STORAGE | BufferUsage.COPY_DST,
  });
  const values = new ArrayBuffer(48);
  new Float32Array(values, 0, 8).set([0.999, 0.999, 0.999, 0.999, 1e-3, 1e-3, 1e-3, 1e-3]);
  new Uint32Array(values, 32, 1)[0] = steps;
  device.queue.writeBuffer(paramsBuffer, 0, values);
  const out = device.createBuffer({ size: invocations * 16, usage: BufferUsage.STORAGE });
  const bindGroup = device.createBindGroup({
    layout: pipeline.getBindGroupLayout(0),
    entries: [
      { binding: 0, resource: { buffer: paramsBuffer } },
      { binding: 1, resource: { buffer: out } },
    ],
  });
  const run = async () => {
    const encoder = device.createCommandEncoder();
    const pass = encoder.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, bindGroup);
    pass.dispatchWorkgroups(workgroups);
    pass.end();
    device.queue.submit([encoder.finish()]);
    await device.queue.onSubmittedWorkDone();
  };
  await run();
  const times: number[] = [];
  for (let r = 0; r < rounds; r++) {
    const t0 = performance.now();
    await run();
    times.push(performance.now() - t0);
  }
  paramsBuffer.destroy();
  out.destroy();
  times.sort((a, b) => a - b);
  const ms = times[times.length >> 1]!;
  return (invocations * steps * FLOPS_PER_STEP) / (ms * 1e6);
}
