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
  'continued_as_new',
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

/**
 * The trace of one run segment (continue-as-new starts a new segment, numbering on). Events stay
 * here until the run stores them on the host (`flushable`), and remain readable by query.
 */
export class Trace {
  readonly events: TraceEvent[] = [];
  private stored = 0;

  /** `carried`: events of the previous segment that were not stored yet. */
  constructor(carried: TraceEvent[] = [], private nextSeq = 1) {
    this.events.push(...carried);
  }

  /** Events not stored yet. */
  unstored(): TraceEvent[] {
    return this.events.slice(this.stored);
  }

  add(type: TraceType, data: unknown = {}, ids: { call_id?: string; action_id?: string } = {}): TraceEvent {
    const event: TraceEvent = { seq: this.nextSeq++, type, ...ids, data };
    this.events.push(event);
    return event;
  }

  get next(): number {
    return this.nextSeq;
  }

  /** Events not stored yet, in batches of at most `maxBytes` of JSON each (one event per batch at least). */
  flushable(maxBytes: number): TraceEvent[][] {
    const batches: TraceEvent[][] = [];
    let batch: TraceEvent[] = [];
    let bytes = 0;
    for (const e of this.unstored()) {
      const size = JSON.stringify(e).length;
      if (batch.length > 0 && bytes + size > maxBytes) {
        batches.push(batch);
        batch = [];
        bytes = 0;
      }
      batch.push(e);
      bytes += size;
    }
    if (batch.length > 0) batches.push(batch);
    return batches;
  }

  /** Bytes of JSON of the events not stored yet. */
  unstoredBytes(): number {
    return this.unstored().reduce((n, e) => n + JSON.stringify(e).length, 0);
  }

  markStored(count: number): void {
    this.stored += count;
  }
}
