// Rank 1 fails with exit code 3 after a short delay; the other ranks would run for a minute.
if (process.env.RANK === '1') {
  setTimeout(() => process.exit(3), 100);
} else {
  console.log('waiting');
  setTimeout(() => {}, 60_000);
}
