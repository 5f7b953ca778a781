/**
 * Fault injection for crash tests. When the worker's `AGENT_FAULT` setting names a point, the
 * process kills itself with SIGKILL on reaching it (the `AGENT_FAULT_COUNT`-th time), exactly as
 * a power cut would: no finally blocks, no flush. The points are listed (and the variable typed)
 * in host/settings.ts.
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
/** Times the armed point is still to be passed before it fires. */
let passes = 0;
let delayMs = 0;

/** Arms `point` (null: none) for this process; the worker does this with its settings. */
export function armFault(point: FaultPoint | null, hold = 0, count = 1, delay = 0): void {
  armed = point;
  holdMs = hold;
  passes = count - 1;
  delayMs = delay;
}

/** Whether the armed point fires now (it is `point`, and every earlier pass is spent). */
function due(point: FaultPoint): boolean {
  if (armed !== point) return false;
  if (passes-- > 0) return false;
  armed = null;
  return true;
}

/** The line a holding worker writes on stderr before it holds (tests wait for it). */
export const holdLine = (point: FaultPoint) => `fault point ${point}: holding`;

export function faultPoint(point: FaultPoint): void {
  if (!due(point)) return;
  if (holdMs === 0) process.kill(process.pid, 'SIGKILL');
  // Written synchronously, so the line is out before the thread stops.
  writeSync(2, `${holdLine(point)} ${holdMs} ms (process ${process.pid})\n`);
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, holdMs);
}

/**
 * A point reached right before the caller hands back a result (`after_local_activity`): the kill
 * comes `AGENT_FAULT_DELAY_MS` later, from a timer, so the result is on its way by then.
 */
export function faultAfter(point: FaultPoint): void {
  if (!due(point)) return;
  setTimeout(() => process.kill(process.pid, 'SIGKILL'), delayMs);
}
