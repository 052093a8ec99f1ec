// A rank that stops at a safe point after SIGINT: it takes 800 ms to get there (longer than the
// launcher's grace in the test), then exits 130. A second SIGINT is only reported.
let interrupted = 0;
process.on('SIGINT', () => {
  interrupted++;
  console.log(`got SIGINT ${interrupted}`);
  if (interrupted > 1) return;
  setTimeout(() => {
    console.log('stopped at a safe point');
    process.exit(130);
  }, 800);
});
console.log('ready');
setTimeout(() => {}, 60_000);
