// Reports a SIGTERM it receives, then exits 0: the launcher must forward the signal.
process.on('SIGTERM', () => {
  console.log('got SIGTERM');
  process.exit(0);
});
console.log('ready');
setTimeout(() => {}, 60_000);
