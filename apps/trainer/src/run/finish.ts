import { encodeSafetensors } from '@webshard/tensor-core/io';
import { uplotAssets, writeFileAtomically } from '#platform';
import { formatBytes } from '../progress.js';
import { type ReportRun, renderReport } from '../report/html-report.js';
import { heldOutLoss, shortSample } from './held-out.js';
import type { LoopResult } from './loop.js';
import type { TrainSummary } from './run-io.js';
import type { Run } from './set-up.js';

/**
 * The end of a run that was not interrupted: the held-out loss and sample (on every rank), then
 * the outputs (`--save` through the strategy's full state dict, then rank 0's `--samples` and
 * `--report`), each written atomically.
 */
export async function finishRun(run: Run, loop: LoopResult): Promise<TrainSummary> {
  const { config, model, backend, say } = run;
  const { records, evals } = loop;
  const last = records.at(-1)!;
  const finalSample = await shortSample(run, config.sampleLength);
  evals.push({ step: last.step, loss: await heldOutLoss(run), sample: finalSample });
  const seconds = (performance.now() - loop.started) / 1000;
  say(
    `trained ${records.length} steps in ${seconds.toFixed(1)} s: loss ${records[0]!.loss.toFixed(4)} -> ${last.loss.toFixed(4)}, held-out loss ${evals.at(-1)!.loss.toFixed(4)}, peak device memory ${formatBytes(last.peakDeviceBytes)}`,
  );
  if (config.save !== null) {
    const save = config.save;
    await run.prepared.withFullStateDict(async (dict) => {
      if (dict === null) return;
      const metadata = {
        format: 'pt',
        config: JSON.stringify(model.config),
        steps: String(last.step),
        seed: String(config.seed),
      };
      await writeFileAtomically(save, await encodeSafetensors(Object.fromEntries(dict), metadata));
    });
    say(`saved: ${config.save}`);
  }
  const summary: TrainSummary = { model, backend, records, evals, sample: finalSample };
  if (!run.lead) return summary;
  if (config.samples !== null) await writeFileAtomically(config.samples, finalSample);
  if (config.report !== null) {
    const run0: ReportRun = {
      name: config.report,
      command: run.io.commandLine ?? null,
      tokensPerStep: config.model === 'gpt' ? config.batchSize * config.blockSize : 0,
      records: [...run.earlier.records, ...records],
      evals: [...run.earlier.evals, ...evals],
    };
    const html = renderReport(
      { title: `webshard-train: ${config.model}`, runs: [run0] },
      await uplotAssets(),
    );
    await writeFileAtomically(config.report, html);
    say(`report: ${config.report}`);
  }
  if (finalSample !== '') say(`sample:\n${finalSample}`);
  return summary;
}
