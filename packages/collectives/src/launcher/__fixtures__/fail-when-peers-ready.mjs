// Rank 1 exits with code 7 once every other rank is up and handling SIGTERM (each writes
// `ready-<rank>` with its pid into the directory in argv[2]); the others report a SIGTERM and
// exit 0, or would run for a minute.
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const dir = process.argv[2];
const rank = Number(process.env.RANK);
const size = Number(process.env.WORLD_SIZE);
if (rank === 1) {
  const others = Array.from({ length: size }, (_, r) => r).filter((r) => r !== 1);
  const poll = setInterval(() => {
    if (others.every((r) => existsSync(join(dir, `ready-${r}`)))) {
      clearInterval(poll);
      console.log('failing');
      process.exit(7);
    }
  }, 10);
} else {
  process.on('SIGTERM', () => {
    console.log('got SIGTERM');
    process.exit(0);
  });
  writeFileSync(join(dir, `ready-${rank}`), String(process.pid));
  setTimeout(() => {}, 60_000);
}
