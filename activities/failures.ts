/**
 * Throwing a failure of core/failures.ts: the one way activities (and the payload guard) make a
 * non-retryable ApplicationFailure, so its type is always one the workflow maps to a reason.
 */
import { ApplicationFailure } from '@temporalio/common';
import { FAILURE_TYPES, type FailureTypeName } from '../core/failures';

export function nonRetryable(type: FailureTypeName, message: string, details?: unknown[]): ApplicationFailure {
  return ApplicationFailure.create({ type: FAILURE_TYPES[type].type, message, nonRetryable: true, ...(details ? { details } : {}) });
}
