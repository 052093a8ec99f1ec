// [Note: native WebGPU noise]
// Dawn and the Vulkan drivers write to file descriptor 2 from native code, once per process that
// creates a WebGPU instance: Dawn's limit clamps on lavapipe and SwiftShader ("Warning:
// maxDynamicUniformBuffersPerPipelineLayout artificially reduced from 1000000 to 16 ...", from
// `dawn::WarningLog()` in Limits.cpp), its reasons for refusing a Vulkan device ("... Vulkan
// shaderUniformBufferArrayDynamicIndexing required", with a `    at CheckVkSuccessImpl (...)`
// line), and Mesa's WSI ("error: XDG_RUNTIME_DIR is invalid or not set in the environment.").
// None of it is about the user's program, and JavaScript cannot intercept a native write in the
// process that makes it. vitest's fork pool pipes each test process's stderr into the main
// process's `process.stderr`, so the main process can drop these lines there: the shared config
// calls `filterNativeWebGpuNoise(process.stderr)` once. native-noise.test.ts (tensor-core) runs a
// real WebGPU backend in a child process and fails if a line of its stderr passes this filter.
// The CLIs filter the same lines for users ([Note: quiet native stderr in the CLIs] in
// packages/collectives/src/cli/native-noise.ts, whose test keeps the two lists equal).

/** Whole stderr lines that Dawn, Vulkan drivers and Mesa print on their own. */
export const NATIVE_WEBGPU_NOISE = [
  /^Warning: maxDynamic\w+PerPipelineLayout artificially reduced from \d+ to \d+ to fit dynamic offset allocation limit\.$/,
  /^Warning: .*Vulkan.*\b\w+ArrayDynamicIndexing required/,
  /^(error|warning): XDG_RUNTIME_DIR is invalid or not set in the environment\.?$/i,
  /^MESA: (warning|error): /,
];

/** The `    at Fn (.../dawn/...)` lines Dawn appends to a warning. */
const DAWN_FRAME = /^\s+at \S+ \(.*[/\\]dawn[/\\].*\)$/;

/** True for a line that only Dawn, a Vulkan driver or Mesa prints. */
export function isNativeWebGpuNoise(line) {
  return NATIVE_WEBGPU_NOISE.some((pattern) => pattern.test(line)) || DAWN_FRAME.test(line);
}

/** `text` without its noise lines (and without the empty lines around what was dropped). */
export function withoutNativeWebGpuNoise(text) {
  if (!text.includes('Warning') && !text.includes('XDG_RUNTIME_DIR') && !text.includes('MESA'))
    return text;
  const lines = text.split('\n');
  const kept = lines.filter((line, i) => {
    if (isNativeWebGpuNoise(line)) return false;
    // The empty line Dawn leaves after a stack frame.
    return !(line === '' && i > 0 && i < lines.length - 1 && DAWN_FRAME.test(lines[i - 1]));
  });
  return kept.join('\n');
}

const FILTERED = Symbol.for('webshard.nativeWebGpuNoiseFilter');

/** Makes `stream.write` drop the noise lines of every chunk written to it. Idempotent. */
export function filterNativeWebGpuNoise(stream) {
  if (stream[FILTERED]) return;
  stream[FILTERED] = true;
  const write = stream.write.bind(stream);
  stream.write = (chunk, ...rest) => {
    const text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
    const kept = withoutNativeWebGpuNoise(text);
    if (kept === text) return write(chunk, ...rest);
    if (kept === '') {
      const callback = rest.find((arg) => typeof arg === 'function');
      if (callback) callback();
      return true;
    }
    return write(kept, ...rest);
  };
}
