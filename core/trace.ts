/**
 * Trace events (SPEC section 6). Sequence numbers are assigned by the workflow, so the trace is
 * part of the deterministic history: no wall-clock times, no absolute host paths.
 */
export const TRACE_TYPES = [
  'run_started',
  'isolation_checked',
  'model_requested',
  'model_retry',
  'plan_recorded',
  'tool_proposed',
  'tool_observed',
  'approval_requested',
  'approval_recorded',
  'approval_ignored',
  'action_written',
  'action_receipt',
  'steer_received',
  'interrupt_received',
  'wrap_up_recorded',
  'verification_started',
  'verification_passed',
  'verification_failed',
  'run_finished',
] as const;

export type TraceType = (typeof TRACE_TYPES)[number];

export interface TraceEvent {
  seq: number;
  type: TraceType;
  call_id?: string;
  action_id?: string;
  data: unknown;
}

export class Trace {
  readonly events: TraceEvent[] = [];

  add(type: TraceType, data: unknown = {}, ids: { call_id?: string; action_id?: string } = {}): TraceEvent {
    const event: TraceEvent = { seq: this.events.length + 1, type, ...ids, data };
    this.events.push(event);
    return event;
  }

  count(type: TraceType): number {
    return this.events.filter((e) => e.type === type).length;
  }
}
