import { spawn } from 'node:child_process';
import { constants as osConstants } from 'node:os';
import type { Readable, Writable } from 'node:stream';
import { isMainThread } from 'node:worker_threads';

/**
 * [Note: quiet native stderr in the CLIs]
 * Dawn (the `webgpu` package), Vulkan drivers and Mesa write to file descriptor 2 from native code
 * once per process that creates a WebGPU instance: Dawn's limit clamps ("Warning:
 * maxDynamicUniformBuffersPerPipelineLayout artificially reduced ..."), its reasons for refusing a
 * Vulkan device ("... Vulkan shaderUniformBufferArrayDynamicIndexing required" and a `    at`
 * line into Dawn's sources) and Mesa's "XDG_RUNTIME_DIR is invalid or not set". None of it is
 * about the user's run. It cannot be silenced at the source: Dawn has no toggle for its log
 * (`create([...])` takes feature toggles, a backend and an adapter, and picking a backend to dodge
 * the Vulkan lines would change which device trains), and a native write to fd 2 never passes
 * through JavaScript in the process that makes it. So the CLIs (`webshard-train`, `webshard-run`)
 * start themselves again as a child whose stderr is a pipe, and copy it to their own stderr
 * without exactly those lines; stdin and stdout stay the terminal's. The child's exit code comes
 * back as the CLI's; a child killed by a signal kills the CLI with the same signal; SIGINT,
 * SIGTERM and SIGHUP sent to the CLI go on to the child (Ctrl-C reaches the child from the
 * terminal as well, and the CLI waits for it). `WEBSHARD_DAWN_LOGS=1` turns this off (every
 * line, and one process). The child, and every process it starts, has `WEBSHARD_STDERR_FILTERED=1`,
 * so a rank started by a filtered CLI does not start itself again, and a worker thread never does;
 * the child dies with the CLI even when the CLI is killed with SIGKILL (`dieWithParent`).
 * The test suites drop the same
 * lines in vitest's main process (tooling/test/src/native-noise.js, kept equal to this list by
 * native-noise.test.ts).
 */

/** Whole stderr lines that only Dawn, Vulkan drivers and Mesa print. */
export const NATIVE_WEBGPU_NOISE: readonly RegExp[] = [
  /^Warning: maxDynamic\w+PerPipelineLayout artificially reduced from \d+ to \d+ to fit dynamic offset allocation limit\.$/,
  /^Warning: .*Vulkan.*\b\w+ArrayDynamicIndexing required/,
  /^(error|warning): XDG_RUNTIME_DIR is invalid or not set in the environment\.?$/i,
  /^MESA: (warning|error): /,
];

/** The `    at Fn (.../dawn/...)` lines Dawn appends to a warning. */
const DAWN_FRAME = /^\s+at \S+ \(.*[/\\]dawn[/\\].*\)$/;

/** True for a line that only Dawn, a Vulkan driver or Mesa prints. */
export function isNativeWebGpuNoise(line: string): boolean {
  return NATIVE_WEBGPU_NOISE.some((pattern) => pattern.test(line)) || DAWN_FRAME.test(line);
}

/** How long a line without its newline waits for the rest before it is written as it is. */
const PARTIAL_LINE_MS = 50;

/**
 * Copies `from` to `to` line by line without the native noise (and without the empty line Dawn
 * leaves after a stack frame). A last line without a newline is written after `PARTIAL_LINE_MS`
 * of quiet, so a prompt or a progress line is not held back. Resolves once `from` has ended.
 */
export function copyWithoutNativeNoise(from: Readable, to: Writable): Promise<void> {
  let partial = '';
  let afterFrame = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const emit = (line: string, newline: boolean) => {
    const dropped = isNativeWebGpuNoise(line) || (afterFrame && line === '' && newline);
    afterFrame = DAWN_FRAME.test(line);
    if (!dropped) to.write(newline ? `${line}\n` : line);
  };
  const flushPartial = () => {
    timer = undefined;
    if (partial === '') return;
    const line = partial;
    partial = '';
    if (!isNativeWebGpuNoise(line)) to.write(line);
  };
  from.setEncoding('utf8');
  from.on('data', (chunk: string) => {
    clearTimeout(timer);
    const lines = (partial + chunk).split('\n');
    partial = lines.pop()!;
    for (const line of lines) emit(line, true);
    if (partial !== '') timer = setTimeout(flushPartial, PARTIAL_LINE_MS);
  });
  return new Promise((resolve) => {
    from.once('end', () => {
      clearTimeout(timer);
      flushPartial();
      resolve();
    });
  });
}

/** Set only in the filtered child: its IPC channel to the CLI that started it. */
const PARENT_CHANNEL = 'WEBSHARD_STDERR_FILTER_CHANNEL';

/**
 * In the filtered child: when the CLI that started it is gone (killed with SIGKILL, which it cannot
 * pass on), the IPC channel closes and the child kills itself the same way, so `kill -9` of a
 * `webshard-run` still takes its ranks down at once, as it did before the CLI started a child
 * (the two-level node-loss test kills a node so). The channel does not keep the child alive, and
 * the variable is not passed on to the processes the child starts.
 */
function dieWithParent(): void {
  delete process.env[PARENT_CHANNEL];
  const channel = process.channel;
  if (channel === undefined) return;
  channel.unref();
  process.once('disconnect', () => {
    process.kill(process.pid, 'SIGKILL');
  });
}

/**
 * Signals the CLI passes on to its child. Ctrl-C reaches both from the terminal too: the child
 * takes a SIGINT that comes twice within moments as one ([Note: signals in the launcher]).
 */
const FORWARDED = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;

/**
 * Call first thing in a CLI's entry: resolves `false` where this process should run the command
 * itself (it is the filtered child already, or `WEBSHARD_DAWN_LOGS=1`), else starts this same
 * command again as a child with its stderr filtered (see [Note: quiet native stderr in the CLIs])
 * and never resolves: this process exits as the child does.
 */
export function runWithNativeNoiseFiltered(): Promise<false> {
  const env = process.env;
  // A rank that runs as a worker thread (webshard-run's default) shares its process's fd 2, which
  // that process filters if it is a CLI; a thread cannot start itself again anyway.
  if (!isMainThread || env.WEBSHARD_STDERR_FILTERED === '1' || env.WEBSHARD_DAWN_LOGS === '1') {
    if (isMainThread && env[PARENT_CHANNEL] === '1') dieWithParent();
    return Promise.resolve(false);
  }
  const child = spawn(process.execPath, [...process.execArgv, ...process.argv.slice(1)], {
    stdio: ['inherit', 'inherit', 'pipe', 'ipc'],
    env: { ...env, WEBSHARD_STDERR_FILTERED: '1', [PARENT_CHANNEL]: '1' },
  });
  const copied = copyWithoutNativeNoise(child.stderr!, process.stderr);
  const forward = (signal: NodeJS.Signals) => () => {
    child.kill(signal);
  };
  const handlers = FORWARDED.map((signal) => [signal, forward(signal)] as const);
  for (const [signal, handler] of handlers) process.on(signal, handler);
  child.once('close', (code, signal) => {
    void copied.then(() => {
      for (const [name, handler] of handlers) process.off(name, handler);
      if (signal !== null) {
        process.kill(process.pid, signal);
        process.exit(128 + (osConstants.signals[signal] ?? 0));
      }
      process.exit(code ?? 1);
    });
  });
  child.once('error', (error) => {
    process.stderr.write(`could not start ${process.argv[1]}: ${error.message}\n`);
    process.exit(1);
  });
  return new Promise(() => {});
}
