#!/usr/bin/env node
// `webshard-report a.jsonl b.jsonl [-o report.html]`: the runs of JSONL logs overlaid on one page
// ([Note: the training report] in report/html-report.ts). No top-level await: the package also
// builds as CommonJS.
async function start(): Promise<void> {
  const { reportMain } = await import('./report/report-cli.js');
  const code = await reportMain(process.argv.slice(2), {
    stdout: (text) => process.stdout.write(text),
    stderr: (text) => process.stderr.write(text),
    cwd: process.env.INIT_CWD ?? process.cwd(),
  });
  process.exitCode = code;
}
void start();
