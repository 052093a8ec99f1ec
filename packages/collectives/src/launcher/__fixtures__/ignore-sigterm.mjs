// Rank 0 ignores SIGTERM so the launcher must escalate to SIGKILL; rank 1 fails as soon as rank 0
// handles SIGTERM (rank 0 writes `ready-0` into the directory in argv[2] once it does).
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const dir = process.argv[2];
if (process.env.RANK === '1') {
  const poll = setInterval(() => {
    if (existsSync(join(dir, 'ready-0'))) {
      clearInterval(poll);
      process.exit(5);
    }
  }, 10);
} else {
  process.on('SIGTERM', () => console.log('ignoring SIGTERM'));
  console.log('ready');
  writeFileSync(join(dir, 'ready-0'), '');
  setTimeout(() => {}, 60_000);
}
