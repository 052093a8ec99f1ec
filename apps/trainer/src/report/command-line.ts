/** An argument as a POSIX shell reads it back: bare where safe, else in single quotes. */
function shellQuote(arg: string): string {
  return /^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, `'\\''`)}'`;
}

/** The command line that runs `argv` again: `webshard-train` and its arguments, quoted. */
export function commandLine(argv: readonly string[]): string {
  return ['webshard-train', ...argv.filter((a) => a !== '--')].map(shellQuote).join(' ');
}
