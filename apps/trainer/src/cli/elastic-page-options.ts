import type { TrainConfig } from '../config.js';
import { UsageError } from '../errors.js';

/** The strategies a tab trains under in an elastic world: its state moves between live members. */
const TAB_STRATEGIES: readonly string[] = ['ddp', 'diloco'];

/**
 * `--elastic-coordinator PORT --browser-port P`: the coordinator serves the page that joins a
 * tab to the world, and the tab trains with the coordinator's own training flags ([Note: browser
 * tabs in an elastic world]). What a tab member cannot do is refused here, by name, before the
 * coordinator starts: strategies whose state lives in files (fsdp restarts from its sharded
 * checkpoints), 16-bit precision, and any flag that reads or writes a file, since a tab has none
 * and the coordinator trains nothing (the Node members keep their own outputs).
 */
export function checkElasticPage(config: TrainConfig): void {
  const refuse = (option: string, why: string) => {
    throw new UsageError(`--elastic-coordinator with --browser-port: ${why}`, { option });
  };
  if (!TAB_STRATEGIES.includes(config.strategy)) {
    refuse(
      '--strategy',
      `tabs join as members of --strategy ${TAB_STRATEGIES.join(' or ')}, not ${config.strategy}`,
    );
  }
  if (config.precision !== 'fp32') {
    refuse('--precision', `elastic members train in fp32, not ${config.precision}`);
  }
  if (config.evalEvery > 0) refuse('--eval-every', 'elastic members evaluate at the end only');
  const files: [string, unknown][] = [
    ['--init', config.init],
    ['--resume', config.resume],
    ['--checkpoint-dir', config.checkpointDir],
    ['--save', config.save],
    ['--samples', config.samples],
    ['--report', config.report],
    ['--log-jsonl', config.logJsonl],
  ];
  for (const [option, value] of files) {
    if (value !== null) {
      refuse(
        option,
        `the tabs train with these flags and a tab reads and writes no files (give ${option} to a Node member)`,
      );
    }
  }
}
