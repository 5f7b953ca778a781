/**
 * Fault injection for crash tests. When AGENT_FAULT names a point, the worker process kills
 * itself with SIGKILL on reaching it, exactly as a power cut would: no finally blocks, no flush.
 */
export const FAULT_POINTS = [
  /** writePatch: the approval is recorded, nothing of the write has happened (no intent yet). */
  'before_write',
  /** writePatch: intent recorded, temporary file written and synced, not yet renamed. */
  'after_temp_write',
  /** writePatch: the target holds the new content, the receipt is missing. */
  'after_rename',
  /** writePatch: receipt recorded, the activity has not completed. */
  'after_receipt',
  /** verify: the model said final, nothing of the verification has happened. */
  'in_verifier',
  /** Local backend: a candidate-test process group has just been spawned and recorded. */
  'during_tests',
  /** decide (live provider): the provider answered and the response is stored; the activity has not completed. */
  'after_model_response',
  /** loadRun of a task's child run: the child has started, its parent may not have recorded it yet. */
  'child_started',
  /** A task's child run stores its last trace events: its outcome is reached, not yet handed to its parent. */
  'child_finishing',
] as const;

export type FaultPoint = (typeof FAULT_POINTS)[number];

export function faultPoint(point: FaultPoint): void {
  if (process.env.AGENT_FAULT === point) process.kill(process.pid, 'SIGKILL');
}
