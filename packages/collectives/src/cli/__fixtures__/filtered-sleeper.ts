// A CLI entry that filters its stderr as webshard-run does, then prints which process runs the
// command (the filtered child) and waits: native-noise.test.ts kills the CLI and watches the child.
import { runWithNativeNoiseFiltered } from '../native-noise.js';

await runWithNativeNoiseFiltered();
process.stdout.write(`child ${process.pid}\n`);
setInterval(() => {}, 1000);
