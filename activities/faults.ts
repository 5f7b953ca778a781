/**
 * Fault injection for crash tests. When AGENT_FAULT names a point, the worker process kills
 * itself with SIGKILL on reaching it, exactly as a power cut would: no finally blocks, no flush.
 */
export type FaultPoint =
  | 'before_write'
  | 'after_temp_write'
  | 'after_rename'
  | 'after_receipt'
  | 'in_verifier'
  | 'during_tests';

export function faultPoint(point: FaultPoint): void {
  if (process.env.AGENT_FAULT === point) process.kill(process.pid, 'SIGKILL');
}
