/**
 * Failures that would repeat on every attempt, made non-retryable at the activities' edge (the
 * workflow then ends the run at once with a reason instead of retrying to its deadline).
 */
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import { z } from 'zod';
import { nonRetryable } from '../core/failures';
import { ProvidersFileError } from '../host/endpoints';
import { StoreError } from '../host/store';
import { ReplayFileError } from '../models/replay';
import { BackendUnavailableError } from '../sandbox/backends/types';

/** errno codes that the same call would meet again: retrying cannot help. */
const DETERMINISTIC_ERRNO = new Set(['EACCES', 'EPERM', 'EROFS', 'EISDIR', 'ENOTDIR', 'ELOOP', 'ENAMETOOLONG']);

/**
 * Turns a failure that would repeat on every attempt into a non-retryable ApplicationFailure
 * with its own type (core/failures.ts), so the run ends at once with a reason instead of
 * retrying to its deadline. Errors are told apart by class or errno code, never by name.
 * Everything else (a lost engine, a busy database, a crash) stays retryable, within the
 * activity's bounded attempts.
 */
export function deterministicFailure(name: string, err: unknown): unknown {
  if (err instanceof ApplicationFailure || err instanceof CancelledFailure) return err;
  const e = err as NodeJS.ErrnoException;
  if (typeof e?.code === 'string' && DETERMINISTIC_ERRNO.has(e.code)) {
    return nonRetryable('InfrastructureError', `${name}: ${e.message}`, [e.code]);
  }
  if (err instanceof BackendUnavailableError) return nonRetryable('InfrastructureError', `${name}: ${err.message}`, [err.detail]);
  if (err instanceof ProvidersFileError) return nonRetryable('InfrastructureError', `${name}: ${err.message}`);
  if (err instanceof ReplayFileError) return nonRetryable('ReplayFileError', `${name}: ${err.message}`);
  if (err instanceof SyntaxError || err instanceof StoreError || err instanceof z.core.$ZodError) {
    return nonRetryable('DataError', `${name}: ${(err as Error).message}`);
  }
  return err;
}

/** Every activity of `activities`, its failures passed through deterministicFailure. */
export function withDeterministicFailures<T extends Record<string, (...args: never[]) => Promise<unknown>>>(activities: T): T {
  return Object.fromEntries(
    Object.entries(activities).map(([name, fn]) => [
      name,
      async (...args: never[]) => {
        try {
          return await fn(...args);
        } catch (err) {
          throw deterministicFailure(name, err);
        }
      },
    ]),
  ) as T;
}
