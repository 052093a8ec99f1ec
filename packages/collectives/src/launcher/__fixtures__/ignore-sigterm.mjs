// Rank 0 ignores SIGTERM so the launcher must escalate to SIGKILL; rank 1 fails at once.
if (process.env.RANK === '1') {
  setTimeout(() => process.exit(5), 100);
} else {
  process.on('SIGTERM', () => console.log('ignoring SIGTERM'));
  console.log('ready');
  setTimeout(() => {}, 60_000);
}
