/**
 * Fault injection for crash tests. When the worker's `AGENT_FAULT` setting names a point, the
 * process kills itself with SIGKILL on reaching it, exactly as a power cut would: no finally
 * blocks, no flush. The points are listed (and the variable typed) in host/settings.ts.
 *
 * With `AGENT_FAULT_HOLD_MS` the worker instead holds still there that long, the whole thread
 * blocked as by a stalled disk, after one line on stderr: the server-fault tests kill the
 * Temporal server while a step is exactly there, and the step then goes on.
 */
import { writeSync } from 'node:fs';
import type { FaultPoint } from './settings';

export { FAULT_POINTS, type FaultPoint } from './settings';

/** The armed point: set by the worker from its settings (`AGENT_FAULT`); none until then. */
let armed: FaultPoint | null = null;
let holdMs = 0;

/** Arms `point` (null: none) for this process; the worker does this with its settings. */
export function armFault(point: FaultPoint | null, hold = 0): void {
  armed = point;
  holdMs = hold;
}

/** The line a holding worker writes on stderr before it holds (tests wait for it). */
export const holdLine = (point: FaultPoint) => `fault point ${point}: holding`;

export function faultPoint(point: FaultPoint): void {
  if (armed !== point) return;
  if (holdMs === 0) process.kill(process.pid, 'SIGKILL');
  // Written synchronously, so the line is out before the thread stops.
  writeSync(2, `${holdLine(point)} ${holdMs} ms (process ${process.pid})\n`);
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, holdMs);
}
