/**
 * Fault injection for crash tests. When the worker's `AGENT_FAULT` setting names a point, the
 * process kills itself with SIGKILL on reaching it, exactly as a power cut would: no finally
 * blocks, no flush. The points are listed (and the variable typed) in host/settings.ts.
 */
import type { FaultPoint } from './settings';

export { FAULT_POINTS, type FaultPoint } from './settings';

/** The armed point: set by the worker from its settings (`AGENT_FAULT`); none until then. */
let armed: FaultPoint | null = null;

/** Arms `point` (null: none) for this process; the worker does this with its settings. */
export function armFault(point: FaultPoint | null): void {
  armed = point;
}

export function faultPoint(point: FaultPoint): void {
  if (armed === point) process.kill(process.pid, 'SIGKILL');
}
