/**
 * Failures that would repeat on every attempt, made non-retryable at the activities' edge (the
 * workflow then ends the run at once with a reason instead of retrying to its deadline).
 */
import { isAbsolute, relative, sep } from 'node:path';
import { Context } from '@temporalio/activity';
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import { z } from 'zod';
import { nonRetryable, retryLater } from '../core/failures';
import { diskFullCode, DiskFullError } from '../host/disk';
import { ProvidersFileError } from '../host/endpoints';
import { StoreError } from '../store/store';
import { ReplayFileError } from '../models/replay';
import { BackendUnavailableError } from '../sandbox/backends/types';

/** errno codes that the same call would meet again: retrying cannot help. */
const DETERMINISTIC_ERRNO = new Set(['EACCES', 'EPERM', 'EROFS', 'EISDIR', 'ENOTDIR', 'ELOOP', 'ENAMETOOLONG']);

/** How the activities' edge treats a full disk: how long a step waits for space, and where the state folder is. */
export interface FailureOptions {
  /** How long (from the activity's first attempt) a step that finds no space left is retried; 0: not at all. */
  diskFullWaitMs: number;
  /** The state folder, to name the owner of a path a full disk was met at when no caller named it. */
  stateDir: string;
}

/**
 * Turns a failure that would repeat on every attempt into a non-retryable ApplicationFailure
 * with its own type (core/failures.ts), so the run ends at once with a reason instead of
 * retrying to its deadline. Errors are told apart by class or errno code, never by name.
 * A full disk waits for space (`DiskFull`, see diskFullFailure). Everything else (a lost engine,
 * a busy database, a crash) stays retryable, within the activity's bounded attempts.
 */
export function deterministicFailure(name: string, err: unknown, options?: FailureOptions): unknown {
  if (err instanceof ApplicationFailure || err instanceof CancelledFailure) return err;
  const full = diskFullOf(err, options?.stateDir ?? null);
  if (full !== null) return diskFullFailure(name, full, options?.diskFullWaitMs ?? 0);
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

/**
 * A full disk met anywhere: the caller's DiskFullError, or a bare ENOSPC / EDQUOT / SQLITE_FULL
 * named by its path (a run's folder is its workspace's; anything else under the state folder is
 * the state folder's; a path elsewhere, such as a temporary folder, is the host's).
 */
function diskFullOf(err: unknown, stateDir: string | null): DiskFullError | null {
  if (err instanceof DiskFullError) return err;
  const code = diskFullCode(err);
  if (code === null) return null;
  const path = (err as NodeJS.ErrnoException).path;
  if (path === undefined || stateDir === null) return new DiskFullError('host', 'a write whose file the error does not name', code);
  const rel = relative(stateDir, path);
  if (rel.startsWith('..') || isAbsolute(rel)) return new DiskFullError('host', 'a file outside the state folder', code);
  const parts = rel.split(sep);
  return parts[0] === 'runs' && parts.length > 2
    ? new DiskFullError('workspace', `runs/${parts[1]}: ${parts.slice(2).join('/')}`, code)
    : new DiskFullError('state folder', rel, code);
}

/**
 * The failure of a step that found no space left. While the wait lasts (counted from the
 * activity's first attempt) and the activity has attempts left, it is retried, spread evenly over
 * what is left of both (at least a second apart), so a disk freed meanwhile lets the run go on
 * with nothing lost; then the run ends `disk_full` with the owner named.
 */
function diskFullFailure(name: string, full: DiskFullError, waitMs: number): ApplicationFailure {
  const message = `${name}: ${full.message}`;
  const details = [full.owner, full.code];
  let info: Context['info'] | null = null;
  try {
    info = Context.current().info;
  } catch {
    // Not inside an activity (a direct call): nothing will retry it.
  }
  if (info === null || waitMs <= 0) return nonRetryable('DiskFull', message, details);
  const waited = Date.now() - info.scheduledTimestampMs;
  const max = info.retryPolicy?.maximumAttempts ?? 0;
  const attemptsLeft = max > 0 ? max - info.attempt : Infinity;
  const left = waitMs - waited;
  if (left <= 0 || attemptsLeft <= 0) {
    return nonRetryable('DiskFull', `${message}; still full after ${Math.round(waited / 1000)} s and ${info.attempt} attempt(s)`, details);
  }
  const delay = Math.min(left, Math.max(1000, Number.isFinite(attemptsLeft) ? left / attemptsLeft : 30_000));
  return retryLater('DiskFull', `${message}; waiting for space (attempt ${info.attempt})`, delay, details);
}

/** Every activity of `activities`, its failures passed through deterministicFailure. */
export function withDeterministicFailures<T extends Record<string, (...args: never[]) => Promise<unknown>>>(
  activities: T,
  options?: FailureOptions,
): T {
  return Object.fromEntries(
    Object.entries(activities).map(([name, fn]) => [
      name,
      async (...args: never[]) => {
        try {
          return await fn(...args);
        } catch (err) {
          throw deterministicFailure(name, err, options);
        }
      },
    ]),
  ) as T;
}
