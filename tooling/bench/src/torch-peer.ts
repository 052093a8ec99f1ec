import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';

/*
 * [Note: honest PyTorch peers]
 * A PyTorch row is only worth printing against the PyTorch a user would install: PyPI's CPU
 * wheel, built with MKL and oneDNN. Debian's python3-torch (1.13) is built against the reference
 * BLAS (`torch.__config__.show()`: `BLAS_INFO=generic`) and ran a 1024 matmul 37x slower than the
 * wheel on the same machine, which made every ratio against it flatter us. So:
 * - every PyTorch row runs one interpreter: `WEBSHARD_TORCH_PYTHON` where set, else the virtual
 *   environment `tooling/peers/torch-venv.sh` makes at `<repo>/.venv-torch` (never whatever
 *   `python3` happens to be first on the PATH);
 * - the interpreter is probed once for its torch version and BLAS, and the row's peer label names
 *   both (`PyTorch 2.13.0+cpu (MKL, oneDNN)`);
 * - a reference-BLAS build is refused as a speed peer (matmul, train steps), with a message naming
 *   the interpreter and how to make the environment. It still serves where BLAS does not enter:
 *   gloo's collectives (the same C++ in every build) and parity fixtures;
 * - a float64 reference (`reference`: fixtures, the GPT-2 precision bench) takes any build, and
 *   where neither the variable nor the venv is there, Debian's python3-torch through the system
 *   interpreter (`/usr/bin/python3`, named, never a PATH lookup): float64 results do not depend on
 *   the BLAS; a float32 row beside them does, and its label names the BLAS;
 * - no torch at all skips the rows with the reason: the benchmarks and the tests pass without it.
 */

/** Where the virtual environment of `tooling/peers/torch-venv.sh` puts its interpreter. */
export const TORCH_VENV_PYTHON = '.venv-torch/bin/python';

/** How to make the environment, as the skip and refusal messages say it. */
export const TORCH_VENV_HINT =
  "make PyPI's CPU wheel with `bash tooling/peers/torch-venv.sh` (or set WEBSHARD_TORCH_PYTHON to a Python that has it)";

/** What one interpreter's torch says about itself. */
export interface TorchBuild {
  /** The interpreter probed. */
  python: string;
  /** `torch.__version__`, local part included (`2.13.0+cpu`). */
  version: string;
  /** `BLAS_INFO` of `torch.__config__.show()` (`mkl`, `openblas`, `generic`), or `unknown`. */
  blas: string;
  /** `torch.backends.mkldnn.is_available()`. */
  oneDnn: boolean;
}

/** A usable peer (its build and the label rows print), or why there is none. */
export type TorchPeer = { build: TorchBuild; label: string } | { skipped: string };

/**
 * What the peer is for: `speed` rows (matmul, train steps) refuse a reference-BLAS build;
 * `collectives` (gloo) do not, since BLAS never runs there; `reference` (fixtures, float64
 * references) takes any build, Debian's system one too where no other is there.
 */
export type TorchPeerUse = 'speed' | 'collectives' | 'reference';

/** Where Debian's python3-torch lives: the system interpreter, tried for `reference` only. */
export const SYSTEM_TORCH_PYTHON = '/usr/bin/python3';

/** The interpreter every PyTorch row runs: `WEBSHARD_TORCH_PYTHON`, else the repository's venv. */
export function torchPython(repoRoot: string, env: NodeJS.ProcessEnv = process.env): string {
  const set = env.WEBSHARD_TORCH_PYTHON;
  return set !== undefined && set !== '' ? set : join(repoRoot, TORCH_VENV_PYTHON);
}

/**
 * `BLAS_INFO` from `torch.__config__.show()`: one `Build settings: BLAS_INFO=mkl, ...` line in
 * torch 2, a `- BLAS_INFO=generic` line of its own in 1.x. `unknown` where it is not there.
 */
export function parseBlasInfo(configShow: string): string {
  const match = /\bBLAS_INFO=([^,\s]+)/.exec(configShow);
  return match?.[1] ?? 'unknown';
}

const BLAS_NAMES: Record<string, string> = {
  mkl: 'MKL',
  openblas: 'OpenBLAS',
  open: 'OpenBLAS',
  accelerate: 'Accelerate',
  blis: 'BLIS',
  flexi: 'FlexiBLAS',
  atlas: 'ATLAS',
  generic: 'reference BLAS',
  unknown: 'BLAS unknown',
};

/** The peer label of a build: `PyTorch 2.13.0+cpu (MKL, oneDNN)`. */
export function torchLabel(build: TorchBuild): string {
  const blas = BLAS_NAMES[build.blas] ?? build.blas;
  return `PyTorch ${build.version} (${blas}${build.oneDnn ? ', oneDNN' : ''})`;
}

const PROBE = [
  'import json, torch',
  'print(json.dumps(dict(version=torch.__version__, config=torch.__config__.show(),',
  '  onednn=bool(torch.backends.mkldnn.is_available()))))',
].join('\n');

/** The last line of a child's stderr that says something (Python's exception line). */
function lastLine(text: string | undefined): string {
  return (
    (text ?? '')
      .split('\n')
      .map((line) => line.trim())
      .filter((line) => line !== '')
      .at(-1) ?? ''
  );
}

/** Asks `python` what torch it has; the reason where it cannot say. */
export function probeTorch(python: string, timeoutMs = 120_000): TorchBuild | { skipped: string } {
  if (python.includes('/') && !existsSync(python)) {
    return { skipped: `${python} not found: ${TORCH_VENV_HINT}` };
  }
  const probe = spawnSync(python, ['-c', PROBE], { encoding: 'utf8', timeout: timeoutMs });
  if (probe.error !== undefined) {
    return { skipped: `${python} did not run (${probe.error.message}): ${TORCH_VENV_HINT}` };
  }
  if (probe.status !== 0) {
    const why = lastLine(probe.stderr) || `exit ${probe.status ?? probe.signal}`;
    return { skipped: `${python} has no usable torch (${why}): ${TORCH_VENV_HINT}` };
  }
  const line = lastLine(probe.stdout);
  let said: { version?: unknown; config?: unknown; onednn?: unknown };
  try {
    said = JSON.parse(line) as typeof said;
  } catch {
    return { skipped: `${python}'s torch probe printed no JSON (last line '${line}')` };
  }
  if (typeof said.version !== 'string' || typeof said.config !== 'string') {
    return { skipped: `${python}'s torch probe printed no version or config (${line})` };
  }
  return {
    python,
    version: said.version,
    blas: parseBlasInfo(said.config),
    oneDnn: said.onednn === true,
  };
}

/**
 * The PyTorch peer for `use`, or why the rows skip: the interpreter of `torchPython`, probed, and
 * for `speed` refused where its torch runs the reference BLAS; for `reference`, `systemPython`
 * (Debian's python3-torch) where that interpreter has no torch and the variable names none
 * ([Note: honest PyTorch peers]).
 */
export function findTorchPeer(
  repoRoot: string,
  use: TorchPeerUse,
  env: NodeJS.ProcessEnv = process.env,
  systemPython: string = SYSTEM_TORCH_PYTHON,
): TorchPeer {
  const python = torchPython(repoRoot, env);
  let build = probeTorch(python);
  const chosen = env.WEBSHARD_TORCH_PYTHON !== undefined && env.WEBSHARD_TORCH_PYTHON !== '';
  if ('skipped' in build && use === 'reference' && !chosen) {
    const system = probeTorch(systemPython);
    if (!('skipped' in system)) build = system;
  }
  if ('skipped' in build) return build;
  if (use === 'speed' && build.blas === 'generic') {
    return {
      skipped: `${python} has PyTorch ${build.version} built with the reference BLAS (BLAS_INFO=generic), refused as a speed peer: ${TORCH_VENV_HINT}`,
    };
  }
  return { build, label: torchLabel(build) };
}

/**
 * Runs a peer's Python script and returns the JSON of its last line of output. Throws with the
 * script, the exit and the end of its stderr where it fails.
 */
export function runTorchScript<T>(
  build: TorchBuild,
  script: string,
  args: readonly string[],
  options: { timeoutMs?: number; env?: NodeJS.ProcessEnv } = {},
): T {
  const run = spawnSync(build.python, [script, ...args], {
    encoding: 'utf8',
    timeout: options.timeoutMs ?? 600_000,
    env: options.env ?? process.env,
    maxBuffer: 16 << 20,
  });
  const line = lastLine(run.stdout);
  if (run.status !== 0 || !line.startsWith('{')) {
    const why = run.error?.message ?? lastLine(run.stderr);
    throw new Error(
      `${build.python} ${script} exited ${run.status ?? run.signal}: ${why || 'no JSON printed'}`,
    );
  }
  return JSON.parse(line) as T;
}
