import { createHash } from 'node:crypto';
import { cp, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runMain, snapshot } from '../test-support/cli.js';
import { type CliFixture, FIXTURES, readCliFixture } from '../test-support/fixtures.js';
import { readReportData } from '../report/html-report.js';

let fixture: CliFixture;
let out: string;
beforeAll(async () => {
  fixture = await readCliFixture();
  out = await mkdtemp(join(tmpdir(), 'webshard-data-safety-'));
});
afterAll(async () => {
  await rm(out, { recursive: true, force: true });
});

let count = 0;
const fresh = () => join(out, `case-${++count}`);
const FSDP = ['--strategy', 'fsdp', '--world-size', '2', '--transport', 'local'];

async function run(extra: readonly string[]) {
  return runMain([...fixture.flags, '--backend', 'cpu', ...extra], FIXTURES);
}

async function runIdOf(step: string): Promise<string> {
  return (JSON.parse(await readFile(join(step, 'run.json'), 'utf8')) as { runId: string }).runId;
}

const sha256 = (text: string | Uint8Array) => createHash('sha256').update(text).digest('hex');

/** Rewrite `file` of step folder `dir` through `edit`, and re-hash it in checkpoint.json (a forgery). */
async function forge(
  dir: string,
  file: string,
  edit: (json: { step: number }) => void,
): Promise<void> {
  const json = JSON.parse(await readFile(join(dir, file), 'utf8'));
  edit(json);
  if (file === 'manifest.json') {
    const { sha256: _, ...body } = json;
    json.sha256 = sha256(JSON.stringify(body));
  }
  const text = JSON.stringify(json);
  await writeFile(join(dir, file), text);
  const manifest = JSON.parse(await readFile(join(dir, 'checkpoint.json'), 'utf8'));
  const entry = manifest.files.find((f: { file: string }) => f.file === file);
  entry.bytes = Buffer.byteLength(text);
  entry.sha256 = sha256(text);
  const { sha256: _, ...body } = manifest;
  manifest.sha256 = sha256(JSON.stringify(body));
  await writeFile(join(dir, 'checkpoint.json'), JSON.stringify(manifest));
}

describe('a checkpoint directory belongs to a run', () => {
  it('a new run refuses an old run’s directory (exit 2, nothing touched); --overwrite-checkpoints replaces it', async () => {
    const dir = fresh();
    const old = await run(['--steps', '6', '--checkpoint-every', '1', '--checkpoint-dir', dir]);
    expect(old.exitCode).toBe(0);
    expect((await readdir(dir)).sort()).toEqual(['latest', 'step-000005', 'step-000006']);
    const oldId = await runIdOf(join(dir, 'step-000006'));
    const before = await snapshot(dir);
    const flags = ['--steps', '3', '--checkpoint-every', '1', '--checkpoint-dir', dir];
    const refused = await run(flags);
    expect(refused.exitCode).toBe(2);
    expect(refused.stderr).toBe(
      `webshard-train: --checkpoint-dir ${dir} holds checkpoints of another run (run ${oldId}, step-000006): pass --resume to continue it, choose another directory, or pass --overwrite-checkpoints to replace them\n`,
    );
    expect(await snapshot(dir)).toEqual(before);

    const replaced = await run([...flags, '--overwrite-checkpoints']);
    expect(replaced.stderr).toBe('');
    expect(replaced.exitCode).toBe(0);
    expect((await readdir(dir)).sort()).toEqual(['latest', 'step-000002', 'step-000003']);
    expect((await readFile(join(dir, 'latest'), 'utf8')).trim()).toBe('step-000003');
    expect(await runIdOf(join(dir, 'step-000003'))).not.toBe(oldId);
    const resumed = await run(['--steps', '4', '--resume', dir]);
    expect(resumed.exitCode).toBe(0);
    expect(resumed.stdout).toContain('(step 3)');
  });

  it('a resumed run keeps its id, replaces a step it saves again whole, and refuses a directory of another run', async () => {
    const dir = fresh();
    expect(
      (await run(['--steps', '4', '--checkpoint-every', '1', '--checkpoint-dir', dir])).exitCode,
    ).toBe(0);
    const id = await runIdOf(join(dir, 'step-000004'));
    const firstSave = await readFile(join(dir, 'step-000004', 'checkpoint.json'), 'utf8');
    const again = await run([
      ...['--steps', '4', '--resume', join(dir, 'step-000003')],
      ...['--checkpoint-every', '1', '--checkpoint-dir', dir],
    ]);
    expect(again.stderr).toBe('');
    expect(again.exitCode).toBe(0);
    expect((await readdir(dir)).sort()).toEqual(['latest', 'step-000003', 'step-000004']);
    expect(await runIdOf(join(dir, 'step-000004'))).toBe(id);
    // A new save (its file names are new), not the old folder rewritten in place.
    expect(await readFile(join(dir, 'step-000004', 'checkpoint.json'), 'utf8')).not.toBe(firstSave);

    const other = fresh();
    expect(
      (await run(['--steps', '2', '--checkpoint-every', '2', '--checkpoint-dir', other])).exitCode,
    ).toBe(0);
    const otherId = await runIdOf(join(other, 'step-000002'));
    const mixed = await run([
      '--steps',
      '5',
      '--resume',
      dir,
      '--checkpoint-every',
      '1',
      '--checkpoint-dir',
      other,
    ]);
    expect(mixed.exitCode).toBe(2);
    expect(mixed.stderr).toBe(
      `webshard-train: --checkpoint-dir ${other} holds checkpoints of another run (run ${otherId}, step-000002): choose another directory, or pass --overwrite-checkpoints to replace them\n`,
    );
  });

  it('--overwrite-checkpoints needs --checkpoint-dir', async () => {
    const r = await run(['--overwrite-checkpoints']);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toBe('webshard-train: --overwrite-checkpoints needs --checkpoint-dir\n');
  });
});

describe('every file of a checkpoint is checked before anything loads (exit 2, naming the file)', () => {
  for (const [strategy, flags, files] of [
    ['single', [], ['checkpoint.json', 'model.safetensors', 'optimizer.safetensors', 'run.json']],
    ['fsdp', FSDP, ['checkpoint.json', 'manifest.json', 'rank0', 'rank1', 'run.json']],
  ] as const) {
    it(`${strategy}: one flipped byte in each file, forged run.json and manifests, a missing file`, async () => {
      const dir = fresh();
      const log = join(dir, 'log.jsonl');
      const saved = await run([
        ...flags,
        '--steps',
        '2',
        '--checkpoint-every',
        '2',
        '--checkpoint-dir',
        dir,
        '--log-jsonl',
        log,
      ]);
      expect(saved.exitCode).toBe(0);
      const step = join(dir, 'step-000002');
      const names = await readdir(step);
      const id = await runIdOf(step);
      const expectRefused = async (copy: string, file: string, detail: string) => {
        const before = await snapshot(dir);
        const r = await run([...flags, '--steps', '3', '--resume', copy, '--log-jsonl', log]);
        expect(r.exitCode, `${file}: ${r.stderr}`).toBe(2);
        expect(r.stderr).toBe(`webshard-train: --resume ${join(copy, file)}: ${detail}\n`);
        expect(await snapshot(dir)).toEqual(before);
      };
      for (const kind of files) {
        const file = names.find((n) => n === kind || n.includes(`-${kind}-of-`))!;
        const copy = fresh();
        await cp(step, copy, { recursive: true });
        const bytes = await readFile(join(copy, file));
        // A byte inside the data (past safetensors' header, inside a JSON hash string).
        const at = file.endsWith('.json') ? bytes.indexOf('"sha256"') + 14 : bytes.length - 5;
        bytes[at] = bytes[at]! === 0x30 ? 0x31 : 0x30;
        await writeFile(join(copy, file), bytes);
        await expectRefused(
          copy,
          file,
          file === 'checkpoint.json'
            ? 'its SHA-256 differs from the one it records (edited or corrupted)'
            : 'its SHA-256 differs from checkpoint.json (corrupted)',
        );
      }
      const forgedRun = fresh();
      await cp(step, forgedRun, { recursive: true });
      await forge(forgedRun, 'run.json', (state) => {
        state.step = 1;
      });
      await expectRefused(
        forgedRun,
        'run.json',
        `step 1 of run ${id}, where checkpoint.json says step 2 of run ${id}`,
      );
      if (strategy === 'fsdp') {
        const forgedManifest = fresh();
        await cp(step, forgedManifest, { recursive: true });
        await forge(forgedManifest, 'manifest.json', (manifest) => {
          manifest.step = 3;
        });
        await expectRefused(
          forgedManifest,
          'manifest.json',
          `step 3 of run ${id}, where checkpoint.json says step 2 of run ${id}`,
        );
      } else {
        const missing = fresh();
        await cp(step, missing, { recursive: true });
        await rm(join(missing, 'optimizer.safetensors'));
        await expectRefused(
          missing,
          'optimizer.safetensors',
          'listed in checkpoint.json but missing',
        );
      }
    });
  }

  it('a latest naming a missing or half-written folder says what it names', async () => {
    const dir = fresh();
    expect(
      (await run(['--steps', '2', '--checkpoint-every', '2', '--checkpoint-dir', dir])).exitCode,
    ).toBe(0);
    await writeFile(join(dir, 'latest'), 'step-000009\n');
    let r = await run(['--steps', '3', '--resume', dir]);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toBe(
      `webshard-train: --resume ${dir}: latest names step-000009, which does not exist\n`,
    );
    await cp(join(dir, 'step-000002'), join(dir, '.step-000003.partial'), { recursive: true });
    await rm(join(dir, '.step-000003.partial', 'checkpoint.json'));
    await writeFile(join(dir, 'latest'), '.step-000003.partial\n');
    r = await run(['--steps', '3', '--resume', dir]);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toBe(
      `webshard-train: --resume ${dir}: latest names .step-000003.partial, which is not a complete checkpoint (no readable checkpoint.json)\n`,
    );
  });
});

describe('the log and report of a resumed run', () => {
  it('keep the steps up to the checkpoint, drop those past it with a note, and append', async () => {
    const dir = fresh();
    const log = join(dir, 'log.jsonl');
    const report = join(dir, 'report.html');
    const outputs = ['--log-jsonl', log, '--report', report];
    const whole = await run([
      '--steps',
      '4',
      '--checkpoint-every',
      '2',
      '--checkpoint-dir',
      dir,
      ...outputs,
    ]);
    expect(whole.exitCode).toBe(0);
    const wholeLog = (await readFile(log, 'utf8')).trim().split('\n');
    const wholeReport = await readFile(report, 'utf8');
    // As if the run had crashed after step 4 with its checkpoint at step 2.
    const resumed = await run(['--steps', '4', '--resume', join(dir, 'step-000002'), ...outputs]);
    expect(resumed.stderr).toBe('');
    expect(resumed.exitCode).toBe(0);
    expect(resumed.stdout).toContain(
      `log: ${log} keeps its 2 lines up to step 2; dropped 2 past it (from a run stopped after its last checkpoint)`,
    );
    const lines = (await readFile(log, 'utf8')).trim().split('\n');
    expect(lines.slice(0, 2)).toEqual(wholeLog.slice(0, 2));
    const parsed = lines.map((l) => JSON.parse(l) as { step: number; loss: number });
    expect(parsed.map((p) => p.step)).toEqual([1, 2, 3, 4]);
    expect(parsed.map((p) => p.loss)).toEqual(
      wholeLog.map((l) => (JSON.parse(l) as { loss: number }).loss),
    );
    // The loss chart covers all four steps, as the unbroken run's did.
    const lossChart = (html: string) =>
      readReportData(html).runs[0]!.records.map((r) => [r.step, r.loss]);
    expect(lossChart(await readFile(report, 'utf8'))).toEqual(lossChart(wholeReport));
    expect(lossChart(wholeReport)).toHaveLength(4);
  });
});
