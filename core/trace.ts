/**
 * Trace events (SPEC section 6). Sequence numbers are assigned by the workflow, so the trace is
 * part of the deterministic history: no wall-clock times, no absolute host paths.
 */
export const TRACE_TYPES = [
  'run_started',
  'repository_loaded',
  /** The worker's operator maximums lowered some of the run's budgets: each field, what was asked, the maximum. */
  'budgets_capped',
  'isolation_checked',
  'setup_started',
  'setup_cached',
  'setup_command',
  'egress_allowed',
  'egress_denied',
  'setup_finished',
  /** A fork's state restored from the forked run: the workspace's digest, the writes put back, the replay's cursor. */
  'fork_restored',
  'model_requested',
  /** A live call's usage: tokens in, out, read from and written to the prompt cache, cost. */
  'model_usage',
  'model_retry',
  /** A reply's text, keyed by its turn (cut when long; `text_ref` names the stored decision, whole): the turn's end for a client. */
  'model_replied',
  'plan_recorded',
  'tool_proposed',
  'tool_observed',
  /** A test or acceptance process changed the workspace; the change was undone (paths, count). */
  'unreceipted_change',
  /** The candidate tests at the untouched base, before the run's first write: status, outcome counts, whether the host had them, the stored list. */
  'baseline_tests',
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
  'task_ended',
  /** An orchestrating run waits for a task to give back budget it holds before its next step. */
  'budget_wait',
  'stop_received',
  /** The stop Signal reached a run of its own (not a task's): such a run stops by a cancel request. */
  'stop_ignored',
  /** An interrupt reached a `final` while it was decided or verified: not verified, the run goes on. */
  'final_interrupted',
  'run_finished',
] as const;

export type TraceType = (typeof TRACE_TYPES)[number];

/**
 * The state a turn starts from (`model_requested`, on a turn's first request) and a run ends in
 * (`run_finished`): what a fork restores after a turn. The transcript is its stored head and the
 * number of entries appended after that head by then (stored later, in order, on the same chain).
 */
export interface TurnState {
  /** Decisions taken from the replay. */
  cursor: number;
  /** The workspace's digest (null when the run does not know it: its workspace was made before digests were kept). */
  workspace_digest: string | null;
  transcript: { head: string | null; pending: number };
}

export interface TraceEvent {
  seq: number;
  type: TraceType;
  call_id?: string;
  action_id?: string;
  data: unknown;
}

/** What a client asks of the `trace` Query: events after a sequence number, or the newest few. */
export interface TraceRequest {
  /** Events with `seq` greater than this (default 0). */
  after?: number;
  /** At most this many events (default and maximum `PAGE_EVENTS`). */
  limit?: number;
  /** Instead of `after`: the newest this many events. */
  tail?: number;
}

/** One answer of the `trace` Query: always well under the 64 KiB payload cap. */
export interface TracePage {
  events: TraceEvent[];
  /** Ask again with `after: next` for more; null when this page reaches the newest event. */
  next: number | null;
  /** The oldest event the run still holds in memory (older ones are in the host store only); null when none. */
  oldest: number | null;
  /** The newest event's sequence number (0 when there is none yet). */
  newest: number;
}

export const PAGE_EVENTS = 200;
/** Bytes of event JSON one page carries at most (one event at least). */
export const PAGE_BYTES = 32 * 1024;
/** Stored events kept in memory for queries; unstored ones are always kept. */
export const WINDOW_EVENTS = 256;

/** The part of a trace carried across continue-as-new. */
export interface CarriedTrace {
  next_seq: number;
  /** Events that were not stored yet. */
  unstored: TraceEvent[];
}

/**
 * The trace of a run as the workflow holds it: numbering across segments, the events not stored
 * in the host store yet, and a bounded window of the newest stored ones for queries. Memory stays
 * bounded however long the run: the run stores its events (`flushable`, then `markStored`), and
 * stored events beyond the window are dropped here.
 */
export class Trace {
  private readonly events: TraceEvent[];
  /** Events at the front of `events` that are stored already. */
  private stored = 0;
  private nextSeq: number;

  constructor(carried: CarriedTrace = { next_seq: 1, unstored: [] }) {
    this.nextSeq = carried.next_seq;
    this.events = [...carried.unstored];
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

  /** The first `count` unstored events are stored now; stored events beyond the window leave memory. */
  markStored(count: number): void {
    this.stored += count;
    const drop = Math.min(this.stored, Math.max(0, this.events.length - WINDOW_EVENTS));
    if (drop > 0) {
      this.events.splice(0, drop);
      this.stored -= drop;
    }
  }

  carried(): CarriedTrace {
    return { next_seq: this.nextSeq, unstored: this.unstored() };
  }

  /** A page for the `trace` Query. */
  page(request: TraceRequest = {}): TracePage {
    const limit = Math.max(1, Math.min(PAGE_EVENTS, Math.floor(request.limit ?? PAGE_EVENTS)));
    const from =
      request.tail !== undefined
        ? this.events.slice(-Math.max(1, Math.min(PAGE_EVENTS, Math.floor(request.tail))))
        : this.events.filter((e) => e.seq > (request.after ?? 0));
    const events: TraceEvent[] = [];
    let bytes = 0;
    for (const e of from) {
      const size = JSON.stringify(e).length;
      if (events.length >= limit || (events.length > 0 && bytes + size > PAGE_BYTES)) break;
      events.push(e);
      bytes += size;
    }
    const newest = this.nextSeq - 1;
    const last = events.at(-1)?.seq ?? request.after ?? newest;
    return { events, next: last < newest && request.tail === undefined ? last : null, oldest: this.events[0]?.seq ?? null, newest };
  }
}
