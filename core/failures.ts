/**
 * Failures as data. An activity failure that would repeat on every attempt is thrown as a
 * non-retryable `ApplicationFailure` whose `type` is a key of `FAILURE_TYPES`; the workflow ends
 * the run `failed` with that type's reason. Every type and its reason has a row in docs/failures.md's
 * failure table (tests/core.test.ts checks it). Pure data: safe to import from workflow code.
 *
 * Types are named here and nowhere else: activities throw `FAILURE_TYPES.X.type`, the workflow's
 * retry policy takes `NON_RETRYABLE_FAILURE_TYPES`, and no error is recognised by its class name.
 */

import { ApplicationFailure } from '@temporalio/common';

/** A run's reason when an activity failure ends it. */
export type ActivityFailureReason =
  'infrastructure_error' | 'model_error' | 'harness_error' | 'activity_failed' | 'disk_full' | 'fork_unavailable';

interface FailureType {
  /** The `ApplicationFailure.type`, equal to its key. */
  type: string;
  /** The run's reason (`failed` / reason) when a failure of this type ends it. */
  reason: ActivityFailureReason;
  /** What it means, as the failure table (docs/failures.md) says it. */
  meaning: string;
  /**
   * A fault that may heal by itself: the activity is retried (at the delays it asks for, within
   * its attempts) while the fault lasts, and the run ends with this type's reason only when the
   * activity gives up; every other type ends the run at once.
   */
  waits?: true;
}

export const FAILURE_TYPES = {
  InfrastructureError: {
    type: 'InfrastructureError',
    reason: 'infrastructure_error',
    meaning:
      'the host cannot do it, the same way on every attempt: a permission error, a missing runtime, a backend this worker lacks, an unreadable providers file or test report',
  },
  DataError: {
    type: 'DataError',
    reason: 'infrastructure_error',
    meaning: 'data the host holds does not parse or is missing: unparsable JSON, a schema mismatch, a digest the store lacks',
  },
  ProtocolError: {
    type: 'ProtocolError',
    reason: 'harness_error',
    meaning:
      'the workflow and its activities disagree (a harness defect): a stored call that is not the one named, a transcript call without its result, apply_patch sent as a read-only tool',
  },
  ReplayFileError: {
    type: 'ReplayFileError',
    reason: 'model_error',
    meaning: 'the replay file cannot be read or is not a valid replay',
  },
  ProviderUnavailable: {
    type: 'ProviderUnavailable',
    reason: 'model_error',
    meaning: "the run's endpoint is gone from the providers file or changed kind, or its key variable is not set on the worker",
  },
  ForkUnavailable: {
    type: 'ForkUnavailable',
    reason: 'fork_unavailable',
    meaning:
      "a fork's workspace cannot be restored as the forked run left it after that turn: a written content the host store no longer holds, or a restored workspace whose digest differs from the one recorded",
  },
  PayloadTooLarge: {
    type: 'PayloadTooLarge',
    reason: 'harness_error',
    meaning: 'a payload over the 64 KiB cap about to enter history (a harness defect), refused by the payload guard',
  },
  DiskFull: {
    type: 'DiskFull',
    reason: 'disk_full',
    meaning:
      "no space left (ENOSPC, EDQUOT, SQLite's SQLITE_FULL) on the file system of a run's workspace or of the state folder (the ledger, the host store): the step waits for space, then the run ends naming the owner",
    waits: true,
  },
} as const satisfies Record<string, FailureType>;

export type FailureTypeName = keyof typeof FAILURE_TYPES;

/** The activities' retry policy: failures of these types are never retried. */
export const NON_RETRYABLE_FAILURE_TYPES: readonly FailureTypeName[] = (Object.keys(FAILURE_TYPES) as FailureTypeName[]).filter(
  (type) => !(FAILURE_TYPES[type] as FailureType).waits,
);

/** Reason by failure type, for the workflow's lookup. */
export const ACTIVITY_FAILURE_REASONS: Readonly<Record<FailureTypeName, ActivityFailureReason>> = Object.fromEntries(
  Object.values(FAILURE_TYPES).map((f) => [f.type, f.reason]),
) as Record<FailureTypeName, ActivityFailureReason>;

/**
 * The reason of a run ended by an activity failure of any other type: a retryable failure (a
 * crash, a lost engine, a busy database) that failed every one of the activity's attempts.
 */
export const RETRIES_EXHAUSTED_REASON: ActivityFailureReason = 'activity_failed';

/** The run's reason for an activity failure of `type` (an `ApplicationFailure.type`). */
export function activityFailureReason(type: string | null | undefined): ActivityFailureReason {
  return Object.prototype.hasOwnProperty.call(ACTIVITY_FAILURE_REASONS, type ?? '')
    ? ACTIVITY_FAILURE_REASONS[type as FailureTypeName]
    : RETRIES_EXHAUSTED_REASON;
}

/**
 * Throws nothing itself: makes the non-retryable ApplicationFailure of one type above, the one way
 * activities, the sandbox, the tools and the payload guard end an activity that would fail alike on
 * every attempt, so its type is always one the workflow maps to a reason.
 */
export function nonRetryable(type: FailureTypeName, message: string, details?: unknown[]): ApplicationFailure {
  return ApplicationFailure.create({ type: FAILURE_TYPES[type].type, message, nonRetryable: true, ...(details ? { details } : {}) });
}

/**
 * The failure of a type that waits (`DiskFull`) while the fault may still heal: retried after
 * `delayMs`, within the activity's attempts. When the wait is over, `nonRetryable` ends the run.
 */
export function retryLater(type: FailureTypeName, message: string, delayMs: number, details?: unknown[]): ApplicationFailure {
  return ApplicationFailure.create({
    type: FAILURE_TYPES[type].type,
    message,
    nonRetryable: false,
    nextRetryDelay: Math.max(1, Math.round(delayMs)),
    ...(details ? { details } : {}),
  });
}

/** Activities in words, for the reason of a run one of them ended by timing out. */
const ACTIVITY_WORDS: Readonly<Record<string, string>> = {
  executeTool: 'the test run',
  verify: 'the verification',
  runSetup: 'the setup phase',
  decide: 'the model request',
};

/**
 * The detail of a run ended by an activity that timed out on every attempt (a retried timeout
 * is the same failure again: a worker that died or hung): which step, and how it timed out. Its
 * reason is `infrastructure_error`. (A schedule-to-start timeout is a lost host, not this.)
 */
export function timeoutDetail(activityType: string, timeoutType: string | null | undefined): string {
  const what = ACTIVITY_WORDS[activityType] ?? `activity ${activityType}`;
  const how =
    timeoutType === 'HEARTBEAT'
      ? 'stopped heartbeating'
      : timeoutType === 'START_TO_CLOSE'
        ? 'did not finish within its time limit'
        : `timed out (${timeoutType ?? 'unknown'})`;
  return `${what} ${how} on each of its attempts (the worker died or hung each time)`;
}
