/**
 * What reaches agentRun from outside: the handlers of its Queries (`queries`, set as the run is
 * made) and of its Signals (`listen`, set once the run's first facts are traced), the parent's
 * stop, and the client message ids taken once (`repeated`). A Signal's effect goes through the
 * run's `receive` (workflows/local-chain.ts); the approval's is the write path's (writes.ts
 * `onApproval`), a task's news the orchestration's (subruns.ts). It touches the run's state and
 * trace through `SignalRun`. The names of the Signals and Queries are messages.ts's.
 */
import * as wf from '@temporalio/workflow';
import { snapshotVersion, type RunSnapshot, type SnapshotRequest } from '../core/delivery';
import type { TraceRequest } from '../core/trace';
import { approvalSignal, interruptSignal, snapshotQuery, stateQuery, steerSignal, stopSignal, traceQuery } from './messages';
import { MAX_STEER_CHARS, Phase, type RunBase } from './run-base';

/** Client message ids remembered for deduplication. */
const SEEN_MESSAGES = 256;

/** What the handlers need of the run beyond `RunBase`. */
export interface SignalRun extends RunBase {
  /** Set as the run records its end: a message arriving later is not taken. */
  readonly ended: boolean;
  /** Applies the effect of something that reached the run where a Signal's takes effect. */
  receive(effect: () => void): void;
  /** An interrupt: the running step it cuts off is cancelled. */
  cancelCall(): void;
  /** A stop: the run's work is cancelled. */
  cancelWork(): void;
  /** An approval Signal, checked against the pending action. */
  onApproval(payload: unknown): void;
}

export class Signals extends Phase<SignalRun> {
  /** The Queries, set as the run is made. */
  queries(): void {
    wf.setHandler(stateQuery, () => this.state.view);
    wf.setHandler(traceQuery, (request?: TraceRequest) => this.trace.page(cleanRequest(request)));
    wf.setHandler(snapshotQuery, (request?: SnapshotRequest) => this.snapshot(request));
  }

  /**
   * The Signals. Set once the run's first facts are known and traced: a message sent with the
   * start, buffered until now, is then taken after `run_started` (a task's stop as a task's).
   */
  listen(): void {
    wf.setHandler(stopSignal, (payload) => this.run.receive(() => this.onStop(payload)));
    wf.setHandler(approvalSignal, (payload) => this.run.receive(() => this.run.onApproval(payload)));
    wf.setHandler(interruptSignal, (payload) =>
      this.run.receive(() => {
        if (this.run.ended || this.repeated(payload?.message_id)) return;
        this.state.interrupted = typeof payload?.reason === 'string' ? payload.reason.slice(0, MAX_STEER_CHARS) : 'interrupted by the user';
        this.trace.add('interrupt_received', { reason: this.state.interrupted });
        this.run.cancelCall();
      }),
    );
    wf.setHandler(steerSignal, (payload) =>
      this.run.receive(() => {
        const message = typeof payload?.message === 'string' ? payload.message.slice(0, MAX_STEER_CHARS) : '';
        if (this.run.ended || message === '' || this.repeated(payload?.message_id)) return;
        this.state.steering.push(message);
        this.trace.add('steer_received', { message });
      }),
    );
  }

  /** A parent stops its task's run: the run's work is cancelled at once (before its loop: as it begins). */
  private onStop(payload: { reason?: unknown; message_id?: unknown } | undefined): void {
    if (this.run.ended) return;
    if (this.view.parent === null) {
      this.trace.add('stop_ignored', { reason: 'a run of its own is stopped by a cancel request, not by the stop Signal' });
      return;
    }
    if (this.repeated(payload?.message_id)) return;
    this.state.stop =
      typeof payload?.reason === 'string' && payload.reason !== '' ? payload.reason.slice(0, MAX_STEER_CHARS) : 'stopped by the parent run';
    this.trace.add('stop_received', { reason: this.state.stop });
    this.run.cancelWork();
  }

  /**
   * The state, its version and where the trace stands, read together. A Query does not change the
   * history length workflowInfo() reports: it is the segment's length at its last workflow task.
   */
  private snapshot(request?: SnapshotRequest): RunSnapshot {
    const page = this.trace.page({ tail: 1 });
    const version = snapshotVersion(page.newest, this.view.segment, wf.workflowInfo().historyLength);
    const since = typeof request?.since === 'number' ? request.since : null;
    return { version, newest: page.newest, oldest: page.oldest, view: since === version ? null : this.view };
  }

  /** True when a client message with this id was taken before (a retried send); remembers it otherwise. */
  repeated(id: unknown): boolean {
    if (typeof id !== 'string' || id === '') return false;
    if (this.state.seen_messages.includes(id)) return true;
    this.state.seen_messages.push(id);
    if (this.state.seen_messages.length > SEEN_MESSAGES) this.state.seen_messages.shift();
    return false;
  }
}

/** A query's request as a client sent it: only whole numbers are taken. */
function cleanRequest(request: unknown): TraceRequest {
  const r = (request ?? {}) as Record<string, unknown>;
  const whole = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? Math.floor(v) : undefined);
  return { after: whole(r.after), limit: whole(r.limit), tail: whole(r.tail) };
}
