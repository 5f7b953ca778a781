/**
 * Why a run ended, the closed list (SPEC section 6 and its additions; docs/failures.md has a row
 * for each). A completed run has none. Metric labels, records and the workflow's stops all use it.
 */
export const RUN_REASONS = [
  'verification_failed',
  'verification_error',
  'replay_exhausted',
  'replay_untrusted',
  'local_not_allowed',
  'repository_untrusted',
  'model_error',
  'model_refused',
  'recovery_uncertain',
  'max_turns',
  'max_tool_calls',
  'max_model_tokens',
  'max_cost_usd',
  'deadline',
  'approval_timeout',
  'isolation_unverified',
  'cancelled',
  'interrupted',
  'invalid_input',
  'host_lost',
  'infrastructure_error',
  'harness_error',
  'activity_failed',
  'setup_failed',
  'disk_full',
  'fork_unavailable',
] as const;

/**
 * Reasons of a record the harness makes for a run that left no outcome of its own: a task whose
 * child workflow never started or ended without one, and in a batch report a run still going or
 * whose workflow ended abnormally (`workflow_` and Temporal's status).
 */
export const NO_OUTCOME_REASONS = [
  'task_not_started',
  'workflow_failed',
  'workflow_terminated',
  'workflow_timed_out',
  'workflow_cancelled',
  'workflow_missing',
  'workflow_unknown',
  'running',
] as const;

export type RunReason = (typeof RUN_REASONS)[number] | (typeof NO_OUTCOME_REASONS)[number];

const KNOWN: ReadonlySet<string> = new Set([...RUN_REASONS, ...NO_OUTCOME_REASONS]);

/** The reason of a batch run whose workflow ended with Temporal's `status` (FAILED, TERMINATED...) and no outcome. */
export function abnormalEnd(status: string): RunReason {
  const reason = `workflow_${status.toLowerCase()}`;
  return isRunReason(reason) ? reason : 'workflow_unknown';
}

export function isRunReason(reason: string): reason is RunReason {
  return KNOWN.has(reason);
}
