// Rank 0 ignores SIGTERM so the launcher must escalate to SIGKILL; rank 1 fails once rank 0 has
// its handler in place (it writes READY_FILE then), so a slow start cannot turn the SIGKILL the
// test expects into a plain SIGTERM death.
import { existsSync, writeFileSync } from 'node:fs';

if (process.env.RANK === '1') {
  const poll = setInterval(() => {
    if (existsSync(process.env.READY_FILE)) {
      clearInterval(poll);
      process.exit(5);
    }
  }, 10);
} else {
  process.on('SIGTERM', () => console.log('ignoring SIGTERM'));
  console.log('ready');
  writeFileSync(process.env.READY_FILE, 'ready');
  setTimeout(() => {}, 60_000);
}
