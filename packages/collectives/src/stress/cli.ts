// `pnpm --filter @webshard/collectives stress`: see [Note: the stress harness].
import { runSeed } from './run-seed.js';
import { parseStressArgs, replayCommand } from './settings.js';

/**
 * [Note: the stress harness]
 * Random programs of every collective, the scalar helpers, sub-groups and send/recv pairs, drawn
 * from one seed ([Note: stress programs]), run on real worlds of each transport
 * (worlds.ts), every output checked bit for bit against a reference each rank computes on its
 * own ([Note: stress reference]), with pauses of busy matmuls between batches ([Note: stress
 * pauses]). One round runs the seed on each transport named; `--minutes M` keeps going, the next
 * seed each round, until M minutes have passed. A failure prints the seed, the op, the rank and
 * the first differing byte, with the command that replays it; the exit code is then 1.
 */
const settings = parseStressArgs(process.argv.slice(2));
const started = performance.now();
const deadline = started + settings.minutes * 60_000;
console.log(
  `stress: seed ${settings.seed} on ${settings.transports.join(', ')}` +
    (settings.minutes > 0
      ? ` for ${settings.minutes} min (then seeds ${settings.seed + 1}, ...)`
      : '') +
    ` (replay: ${replayCommand(settings, settings.transports.join(','), settings.seed)})`,
);
let failed = 0;
let worlds = 0;
let seed = settings.seed;
do {
  for (const transport of settings.transports) {
    const result = await runSeed(settings, transport, seed);
    worlds++;
    for (const line of result.lines) console.log(line);
    if (!result.ok) failed++;
    if (settings.minutes > 0 && performance.now() > deadline) break;
  }
  seed++;
} while (settings.minutes > 0 && performance.now() < deadline);
const minutes = ((performance.now() - started) / 60_000).toFixed(1);
console.log(`stress: ${worlds} worlds, ${failed} failed, ${minutes} min`);
process.exit(failed === 0 ? 0 : 1);
