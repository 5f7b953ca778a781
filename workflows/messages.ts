/**
 * The names a client uses to reach a run: workflow types, Signals and Queries, each defined once
 * here. Clients import them through client/run-access.ts; nothing else spells these strings.
 * This file holds only definitions (no workflow code), so importing it pulls in nothing else.
 */
import * as wf from '@temporalio/workflow';
import type { RunView } from '../core/run-view';
import type { TracePage, TraceRequest } from '../core/trace';
import type { RunSnapshot, SnapshotRequest } from '../core/delivery';
import type { EvalProgress } from '../core/batch-plan';

/** Workflow types. */
export const AGENT_RUN = 'agentRun';
export const AGENT_EVAL = 'agentEval';

/**
 * Every message a client sends carries an id derived from its origin (a command's own id, a
 * console form's token), so a client that retries a send never acts twice: the run ignores an
 * id it has seen.
 */
export interface MessageId {
  message_id?: string;
}

/** SPEC section 4: `{action_id, decision, args_digest, workspace_digest, principal?, reason?}`. */
export const approvalSignal = wf.defineSignal<[unknown]>('approval');
export const steerSignal = wf.defineSignal<[{ message: string } & MessageId]>('steer');
export const interruptSignal = wf.defineSignal<[({ reason?: string } & MessageId)?]>('interrupt');

/** A parent stops the run of one of its tasks: it ends `cancelled` / `interrupted`. */
export const stopSignal = wf.defineSignal<[{ reason: string } & MessageId]>('stop');
/** A task's run tells its parent how it is doing (the roster), never its outcome (that is its result). */
export const taskUpdateSignal =
  wf.defineSignal<[{ task_id: string; status: string; pending_path: string | null; run_id: string }]>('task_update');

export const stateQuery = wf.defineQuery<RunView>('state');
/**
 * The state with its version and where the trace stands, in one answer (the event stream's reader
 * asks it every tick; the view comes only when it changed since the caller's version).
 */
export const snapshotQuery = wf.defineQuery<RunSnapshot, [SnapshotRequest?]>('snapshot');
/** A page of the trace events the run holds in memory (the host store has the rest). */
export const traceQuery = wf.defineQuery<TracePage, [TraceRequest?]>('trace');

/** The batch's progress (agentEval). */
export const evalProgressQuery = wf.defineQuery<EvalProgress>('progress');
