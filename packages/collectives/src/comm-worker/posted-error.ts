import { CollectiveError, errorFromAbortReason, GroupAbortedError } from '../errors.js';
import type { PostedError } from './handshake.js';

/**
 * Errors across the thread boundary: the worker's group raises the typed collective errors of
 * every path; they cross as their class, message, fields and abort reason (`postError`), and the
 * rank's thread raises the same class with the same message (`rebuildError`).
 */

/** An error as it crosses to the rank's thread. */
export function postError(error: unknown): PostedError {
  if (CollectiveError.isInstance(error)) {
    const { op, rank, seq, peer } = error as CollectiveError;
    const reason = (error as { reason?: PostedError['reason'] }).reason;
    return {
      name: error.name,
      message: error.message,
      fields: { op, rank, seq, ...(peer === undefined ? {} : { peer }) },
      ...(reason === undefined ? {} : { reason }),
    };
  }
  if (error instanceof Error) return { name: error.name, message: error.message };
  return { name: 'Error', message: String(error) };
}

/** The typed error a posted one stands for, with the worker's message. */
export function rebuildError(posted: PostedError): Error {
  let error: Error;
  if (posted.fields !== undefined && posted.reason !== undefined)
    error = errorFromAbortReason(posted.fields, posted.reason);
  else if (posted.fields !== undefined)
    error = new GroupAbortedError(posted.fields, posted.message);
  else {
    error = new Error(posted.message);
    error.name = posted.name;
  }
  error.message = posted.message;
  return error;
}
