// The PyTorch peer's detection and refusal, with fake interpreters: shell scripts that answer the
// probe as a torch build would (no torch needed). The configs are the first lines of what
// `torch.__config__.show()` printed for PyPI's 2.13.0+cpu wheel and Debian's python3-torch 1.13.
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  findTorchPeer,
  parseBlasInfo,
  probeTorch,
  runTorchScript,
  TORCH_VENV_HINT,
  torchLabel,
  torchPython,
} from './torch-peer.js';

const WHEEL_CONFIG =
  'PyTorch built with:\n  - GCC 13.3\n  - Intel(R) MKL-DNN v3.12.0\n  - Build settings: BLAS_INFO=mkl, BUILD_TYPE=Release, LAPACK_INFO=mkl, TORCH_VERSION=2.13.0, USE_MKL=ON, \n';
const DEBIAN_CONFIG =
  'PyTorch built with:\n  - GCC 12.2\n  - BLAS_INFO=generic\n  - LAPACK_INFO=generic\n  - Build settings: BUILD_TYPE=Release, TORCH_VERSION=1.13.0\n';

const dir = mkdtempSync(join(tmpdir(), 'torch-peer-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A fake `python` that prints `stdout` (and `stderr`) and exits with `code`, whatever it is asked. */
function fakePython(name: string, stdout: string, code = 0, stderr = ''): string {
  const path = join(dir, name);
  const quote = (text: string) => `'${text.replaceAll("'", "'\\''")}'`;
  writeFileSync(
    path,
    `#!/bin/sh\nprintf '%s\\n' ${quote(stdout)}\nprintf '%s\\n' ${quote(stderr)} >&2\nexit ${code}\n`,
  );
  chmodSync(path, 0o755);
  return path;
}

const answer = (version: string, config: string, onednn: boolean) =>
  JSON.stringify({ version, config, onednn });
const wheel = fakePython('wheel', answer('2.13.0+cpu', WHEEL_CONFIG, true));
const debian = fakePython('debian', answer('1.13.0', DEBIAN_CONFIG, true));
const noTorch = fakePython('no-torch', '', 1, "ModuleNotFoundError: No module named 'torch'");

describe('torchPython', () => {
  it("is the repository's venv unless WEBSHARD_TORCH_PYTHON says otherwise", () => {
    expect(torchPython('/repo', {})).toBe('/repo/.venv-torch/bin/python');
    expect(torchPython('/repo', { WEBSHARD_TORCH_PYTHON: '' })).toBe(
      '/repo/.venv-torch/bin/python',
    );
    expect(torchPython('/repo', { WEBSHARD_TORCH_PYTHON: '/opt/py/bin/python' })).toBe(
      '/opt/py/bin/python',
    );
  });
});

describe('parseBlasInfo', () => {
  it("reads torch 2's one settings line and 1.x's line of its own", () => {
    expect(parseBlasInfo(WHEEL_CONFIG)).toBe('mkl');
    expect(parseBlasInfo(DEBIAN_CONFIG)).toBe('generic');
    expect(parseBlasInfo('PyTorch built with:\n  - GCC 9\n')).toBe('unknown');
  });
});

describe('torchLabel', () => {
  it('names the version and the BLAS', () => {
    expect(torchLabel({ python: 'p', version: '2.13.0+cpu', blas: 'mkl', oneDnn: true })).toBe(
      'PyTorch 2.13.0+cpu (MKL, oneDNN)',
    );
    expect(torchLabel({ python: 'p', version: '2.5.1', blas: 'openblas', oneDnn: false })).toBe(
      'PyTorch 2.5.1 (OpenBLAS)',
    );
    expect(torchLabel({ python: 'p', version: '1.13.0', blas: 'generic', oneDnn: false })).toBe(
      'PyTorch 1.13.0 (reference BLAS)',
    );
    expect(torchLabel({ python: 'p', version: '2.0', blas: 'eigen', oneDnn: false })).toBe(
      'PyTorch 2.0 (eigen)',
    );
  });
});

describe('probeTorch', () => {
  it("reads a build's version, BLAS and oneDNN", () => {
    expect(probeTorch(wheel)).toEqual({
      python: wheel,
      version: '2.13.0+cpu',
      blas: 'mkl',
      oneDnn: true,
    });
  });

  it("gives Python's last error line where torch does not import", () => {
    expect(probeTorch(noTorch)).toEqual({
      skipped: `${noTorch} has no usable torch (ModuleNotFoundError: No module named 'torch'): ${TORCH_VENV_HINT}`,
    });
  });

  it('says how to make the venv where the interpreter is not there', () => {
    const missing = join(dir, 'nowhere', 'python');
    expect(probeTorch(missing)).toEqual({ skipped: `${missing} not found: ${TORCH_VENV_HINT}` });
  });

  it('skips an interpreter that prints something other than the probe', () => {
    const odd = fakePython('odd', 'Python 3.11.7');
    expect(probeTorch(odd)).toEqual({
      skipped: `${odd}'s torch probe printed no JSON (last line 'Python 3.11.7')`,
    });
  });
});

describe('findTorchPeer', () => {
  it('takes the wheel as a speed peer, labelled with its version and BLAS', () => {
    expect(findTorchPeer('/repo', 'speed', { WEBSHARD_TORCH_PYTHON: wheel })).toEqual({
      build: { python: wheel, version: '2.13.0+cpu', blas: 'mkl', oneDnn: true },
      label: 'PyTorch 2.13.0+cpu (MKL, oneDNN)',
    });
  });

  it('refuses a reference-BLAS build as a speed peer, naming the interpreter and the fix', () => {
    expect(findTorchPeer('/repo', 'speed', { WEBSHARD_TORCH_PYTHON: debian })).toEqual({
      skipped: `${debian} has PyTorch 1.13.0 built with the reference BLAS (BLAS_INFO=generic), refused as a speed peer: make PyPI's CPU wheel with \`bash tooling/peers/torch-venv.sh\` (or set WEBSHARD_TORCH_PYTHON to a Python that has it)`,
    });
  });

  it('keeps a reference-BLAS build for collectives, where BLAS never runs', () => {
    const peer = findTorchPeer('/repo', 'collectives', { WEBSHARD_TORCH_PYTHON: debian });
    expect(peer).toEqual({
      build: { python: debian, version: '1.13.0', blas: 'generic', oneDnn: true },
      label: 'PyTorch 1.13.0 (reference BLAS, oneDNN)',
    });
  });

  it("takes Debian's system torch as a reference where the venv is not made, not for speed", () => {
    const root = join(dir, 'repo');
    expect(findTorchPeer(root, 'reference', {}, debian)).toEqual({
      build: { python: debian, version: '1.13.0', blas: 'generic', oneDnn: true },
      label: 'PyTorch 1.13.0 (reference BLAS, oneDNN)',
    });
    expect(findTorchPeer(root, 'speed', {}, debian)).toEqual({
      skipped: `${root}/.venv-torch/bin/python not found: ${TORCH_VENV_HINT}`,
    });
    // An interpreter the variable names is the one used, even for a reference.
    expect(findTorchPeer(root, 'reference', { WEBSHARD_TORCH_PYTHON: noTorch }, debian)).toEqual({
      skipped: `${noTorch} has no usable torch (ModuleNotFoundError: No module named 'torch'): ${TORCH_VENV_HINT}`,
    });
    expect(findTorchPeer(root, 'reference', {}, noTorch)).toEqual({
      skipped: `${root}/.venv-torch/bin/python not found: ${TORCH_VENV_HINT}`,
    });
  });

  it("looks in the repository's .venv-torch without the variable, and skips where it is not made", () => {
    const root = join(dir, 'repo');
    expect(findTorchPeer(root, 'speed', {})).toEqual({
      skipped: `${root}/.venv-torch/bin/python not found: ${TORCH_VENV_HINT}`,
    });
  });
});

describe('runTorchScript', () => {
  const build = { python: wheel, version: '2.13.0+cpu', blas: 'mkl', oneDnn: true };

  it("returns the JSON of the script's last line", () => {
    const script = fakePython('step', 'warming up\n{"ms": 7.5}');
    expect(runTorchScript({ ...build, python: script }, 'step.py', [])).toEqual({ ms: 7.5 });
  });

  it('throws with the exit and the last error line where the script fails', () => {
    const failing = fakePython('failing', '', 3, 'RuntimeError: out of memory');
    expect(() => runTorchScript({ ...build, python: failing }, 'step.py', ['1'])).toThrow(
      `${failing} step.py exited 3: RuntimeError: out of memory`,
    );
  });
});
