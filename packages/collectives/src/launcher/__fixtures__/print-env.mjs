// Prints what the launcher passed, in two writes to test line prefixing of partial lines.
const { RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, WEBSHARD_TOKEN } = process.env;
process.stdout.write(`env ${RANK} ${LOCAL_RANK} ${WORLD_SIZE} ${MASTER_ADDR} `);
process.stdout.write(
  `${MASTER_PORT !== undefined} ${(WEBSHARD_TOKEN ?? '').length} ${process.argv.slice(2).join(',')}\nsecond line\n`,
);
process.stderr.write(`err ${RANK}`);
