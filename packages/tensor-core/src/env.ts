import { ArgumentError } from './errors.js';

/**
 * An option that an environment variable may set: `option` when given, else the variable's value
 * when it is one of `choices`, else `fallback` when it is unset or empty. Any other value is an
 * `ArgumentError` naming `op`, the variable and the choices. Outside Node the variable is unset.
 */
export function envChoice<T extends string>(
  op: string,
  name: string,
  option: T | undefined,
  choices: readonly T[],
  fallback: T,
): T {
  if (option !== undefined) return option;
  const value = typeof process !== 'undefined' ? process.env?.[name] : undefined;
  if (value === undefined || value === '') return fallback;
  if ((choices as readonly string[]).includes(value)) return value as T;
  throw new ArgumentError(op, `${name}=${value} is not one of ${choices.join(', ')}`);
}
