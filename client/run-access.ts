/**
 * Typed access to runs and batches, in one place: starting them, reading their state and trace,
 * sending approvals, steering, interrupts and a task's stop. The command line, the console, `follow`, the eval
 * client, the bench and the tests go through here; the names of workflow types, Signals and
 * Queries come from workflows/messages.ts and are spelled nowhere else.
 *
 * Every Query has a deadline (a run whose worker is gone must not hang a command), and every
 * message carries an id derived from where it came from, so a send retried by a client is taken
 * once.
 */
import { randomBytes } from 'node:crypto';
import { defaultPayloadConverter, WorkflowNotFoundError, type Client, type WorkflowHandle } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import type { ApprovalSignal, RunInput } from '../core/contracts';
import type { PendingActionView, RunOutcome, RunView } from '../core/run-view';
import type { TraceEvent, TracePage, TraceRequest } from '../core/trace';
import {
  AGENT_EVAL,
  AGENT_RUN,
  approvalSignal,
  evalProgressQuery,
  interruptSignal,
  snapshotQuery,
  stateQuery,
  steerSignal,
  stopSignal,
  traceQuery,
} from '../workflows/messages';
import type { RunSnapshot } from '../core/delivery';
import type { EvalInput, EvalProgress, EvalResult } from '../core/batch-plan';
import { startThroughOutage, type Patience } from './server-away';

/** How long a Query may take before the command says no worker answered. */
export const QUERY_DEADLINE_MS = 5_000;
/** How long reading the result of a run already closed may take. */
export const RESULT_DEADLINE_MS = 30_000;

/** This process's own id: the origin of the messages it sends (drawn once, before any send). */
export const ORIGIN = `cli-${process.pid}-${randomBytes(6).toString('hex')}`;

/** agentRun and agentEval as a client sees them: what they take and answer (the code is the worker's). */
type AgentRun = (...args: unknown[]) => Promise<RunOutcome>;
type AgentEval = (input: EvalInput) => Promise<EvalResult>;

export type RunHandle = WorkflowHandle<AgentRun>;
export type BatchHandle = WorkflowHandle<AgentEval>;

export function runHandle(client: Client, workflowId: string): RunHandle {
  return client.workflow.getHandle<AgentRun>(workflowId);
}

export function batchHandle(client: Client, batch: string): BatchHandle {
  return client.workflow.getHandle<AgentEval>(batch);
}

/** Starts a run; while the server is away (restarting, cut off) the start is asked again (client/server-away.ts). */
export function startRun(client: Client, input: RunInput, o: { taskQueue: string; workflowId: string; patience?: Patience }) {
  return startThroughOutage(
    client,
    o.workflowId,
    () => client.workflow.start<AgentRun>(AGENT_RUN, { taskQueue: o.taskQueue, workflowId: o.workflowId, args: [input] }),
    o.patience,
  );
}

/** Starts a run with any arguments (the workflow validates them): for tests of bad input. */
export function startRunWithArgs(client: Client, args: unknown[], o: { taskQueue: string; workflowId: string }) {
  return client.workflow.start<AgentRun>(AGENT_RUN, { taskQueue: o.taskQueue, workflowId: o.workflowId, args });
}

export function startEval(client: Client, input: EvalInput, o: { taskQueue: string; workflowId: string }) {
  return client.workflow.start<AgentEval>(AGENT_EVAL, { taskQueue: o.taskQueue, workflowId: o.workflowId, args: [input] });
}

/** A visibility query over runs (`extra` adds conditions). */
export function runsQuery(extra: string): string {
  return `WorkflowType = '${AGENT_RUN}'${extra ? ` AND ${extra}` : ''}`;
}

const withDeadline = <T>(handle: WorkflowHandle, ms: number, fn: () => Promise<T>) => handle.client.withDeadline(Date.now() + ms, fn);

export function queryState(handle: RunHandle, ms = QUERY_DEADLINE_MS): Promise<RunView> {
  return withDeadline(handle, ms, () => handle.query(stateQuery));
}

export function queryTrace(handle: RunHandle, request: TraceRequest = {}, ms = QUERY_DEADLINE_MS): Promise<TracePage> {
  return withDeadline(handle, ms, () => handle.query(traceQuery, request));
}

/** The run's state with its version; `view` is null while `since` is still the current version. */
export function querySnapshot(handle: RunHandle, since?: number, ms = QUERY_DEADLINE_MS): Promise<RunSnapshot> {
  return withDeadline(handle, ms, () => handle.query(snapshotQuery, since === undefined ? {} : { since }));
}

/**
 * The events the run holds in memory after `after`, page by page. `oldest` is the oldest event it
 * still holds: events between `after` and `oldest` are in the host store only.
 */
export async function traceSince(
  handle: RunHandle,
  after = 0,
  ms = QUERY_DEADLINE_MS,
): Promise<{ events: TraceEvent[]; oldest: number | null; newest: number }> {
  const events: TraceEvent[] = [];
  let page = await queryTrace(handle, { after }, ms);
  const { oldest } = page;
  for (;;) {
    events.push(...page.events);
    if (page.next === null) return { events, oldest, newest: page.newest };
    page = await queryTrace(handle, { after: page.next }, ms);
    // Between two pages the run may have stored events and dropped them from memory, or continued
    // as new: a page can begin past events it no longer holds (they are in the host store), and the
    // events returned end before such a gap.
    if (page.events.length > 0 && page.events[0].seq !== events.at(-1)!.seq + 1) return { events, oldest, newest: page.newest };
  }
}

/**
 * The input a workflow (a run, a batch) was started with, read from its history (its latest
 * segment carries the same), or null when there is no such workflow.
 */
export async function startInput<T = unknown>(handle: WorkflowHandle): Promise<T | null> {
  try {
    await handle.describe();
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return null;
    throw err;
  }
  const history = await handle.fetchHistory();
  const payload = history.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0];
  return payload ? defaultPayloadConverter.fromPayload<T>(payload) : null;
}

export async function isRunning(handle: RunHandle): Promise<boolean> {
  return (await handle.describe()).status.name === 'RUNNING';
}

/** A step of a run that the server retries, as describe shows it: which, at which attempt, and its last failure. */
export interface RetriedStep {
  activity_id: string;
  activity: string;
  attempt: number;
  failure: string;
  type: string | null;
}

/**
 * Whether the run still goes on, and its steps being retried after a failure (a full disk
 * waiting for space shows here), asked of the server within `ms`.
 */
export async function runProgress(handle: RunHandle, ms = QUERY_DEADLINE_MS): Promise<{ running: boolean; retried: RetriedStep[] }> {
  const d = await withDeadline(handle, ms, () => handle.describe());
  const retried = (d.raw.pendingActivities ?? [])
    .filter((a) => (a.attempt ?? 1) > 1 && a.lastFailure)
    .map((a) => ({
      activity_id: a.activityId ?? '',
      activity: a.activityType?.name ?? '?',
      attempt: a.attempt ?? 1,
      failure: a.lastFailure?.message ?? '',
      type: a.lastFailure?.applicationFailureInfo?.type ?? null,
    }));
  return { running: d.status.name === 'RUNNING', retried };
}

/**
 * A run whose workflow task fails again and again (a worker's code cannot replay its history, or
 * it throws): the pending task's attempt, the failure the server recorded, and the worker that
 * reported it, whose identity names its build (docs/failures.md).
 */
export interface WedgedTask {
  /** True when the task fails on nondeterminism: the history asks for code this build does not have. */
  nondeterminism: boolean;
  attempt: number;
  /** The build of the worker that failed it (from its identity), or null when it names none. */
  build: string | null;
  identity: string;
  error: string;
  since: string | null;
}

/** History events read back from a run's end to find why its workflow task fails. */
const WEDGE_EVENTS = 50;

/** The run's workflow task when it fails again and again (see WedgedTask), asked of the server within `ms`; null otherwise. */
export async function wedgedTask(handle: RunHandle, ms = QUERY_DEADLINE_MS): Promise<WedgedTask | null> {
  const d = await withDeadline(handle, ms, () => handle.describe());
  const attempt = d.raw.pendingWorkflowTask?.attempt ?? 1;
  if (d.status.name !== 'RUNNING' || attempt < 2) return null;
  const { history } = await withDeadline(handle, ms, () =>
    handle.client.workflowService.getWorkflowExecutionHistoryReverse({
      namespace: handle.client.options.namespace,
      execution: { workflowId: handle.workflowId, runId: d.runId },
      maximumPageSize: WEDGE_EVENTS,
    }),
  );
  for (const e of history?.events ?? []) {
    // A task that completed since: what failed before is over.
    if (e.workflowTaskCompletedEventAttributes) return null;
    const failed = e.workflowTaskFailedEventAttributes;
    if (!failed) continue;
    const identity = failed.identity ?? '';
    return {
      nondeterminism: failed.cause === temporal.api.enums.v1.WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_NON_DETERMINISTIC_ERROR,
      attempt,
      build: /\bbuild (\S+)/.exec(identity)?.[1] ?? null,
      identity,
      error: failed.failure?.message ?? '',
      since: e.eventTime ? new Date(Number(e.eventTime.seconds ?? 0) * 1000).toISOString() : null,
    };
  }
  return null;
}

/** What a wedged run's readers say: the run, the build, the error, and what an operator does. */
export function wedgedLine(workflowId: string, w: WedgedTask): string {
  const what = w.nondeterminism ? 'fails on nondeterminism' : 'fails';
  return `run ${workflowId} is wedged: its workflow task ${what} on build ${w.build ?? `(not named: ${w.identity})`}, attempt ${w.attempt}${w.since ? ` since ${w.since}` : ''}: ${w.error} (docs/failures.md: deploy the build that started it, reset it, or end it with a record)`;
}

/** The outcome of a run (waits for a running one); a closed run's is read within `ms`. */
export async function runOutcome(handle: RunHandle, ms: number | null = RESULT_DEADLINE_MS): Promise<RunOutcome> {
  const read = () => handle.result();
  return ms === null ? read() : withDeadline(handle, ms, read);
}

export interface RunReading {
  view: RunView;
  /** The newest events the run holds (empty for a closed run: its trace is in the host store). */
  trace: TraceEvent[];
  running: boolean;
}

/**
 * A run's state: a closed run's from its result (no worker needed), a running one's by Query.
 * `tail` trace events come with it. `noAnswer` runs once when the Queries find no worker (e.g.
 * starts one), and then they are asked again.
 */
export async function readRun(
  handle: RunHandle,
  o: { tail?: number; viewOnly?: boolean; noAnswer?: () => Promise<void> } = {},
): Promise<RunReading> {
  if (!(await isRunning(handle))) return { view: (await runOutcome(handle)).state, trace: [], running: false };
  const ask = async () => {
    const view = await queryState(handle);
    if (o.viewOnly) return { view, trace: [], running: true };
    const trace = o.tail === undefined ? (await traceSince(handle)).events : (await queryTrace(handle, { tail: o.tail })).events;
    return { view, trace, running: true };
  };
  try {
    return await ask();
  } catch (err) {
    if (!o.noAnswer) throw await noAnswer(handle, err);
    await o.noAnswer();
    return ask().catch(async (again: unknown) => {
      throw await noAnswer(handle, again);
    });
  }
}

/** Why a Query found no answer: the run is wedged (WedgedRun), or no worker answered (NoWorkerAnswered). */
async function noAnswer(handle: RunHandle, err: unknown): Promise<NoWorkerAnswered> {
  const wedged = await wedgedTask(handle).catch(() => null);
  return wedged ? new WedgedRun(handle.workflowId, wedged, err) : new NoWorkerAnswered(err);
}

export class NoWorkerAnswered extends Error {
  constructor(
    override readonly cause: unknown,
    message = `no worker answered the run's Query (${(cause as Error)?.message ?? String(cause)})`,
  ) {
    super(message);
    this.name = 'NoWorkerAnswered';
  }
}

/** The run's workflow task fails again and again: no worker can read it until an operator acts. */
export class WedgedRun extends NoWorkerAnswered {
  constructor(
    workflowId: string,
    readonly wedged: WedgedTask,
    cause: unknown,
  ) {
    super(cause, wedgedLine(workflowId, wedged));
    this.name = 'WedgedRun';
  }
}

/**
 * A person's answer to a pending action, bound to the digests shown to them (the one way a
 * client makes the Signal's payload, whose `decision` field is SPEC's). `messageId` makes a retried send count once.
 */
export function approvalFor(
  p: Pick<PendingActionView, 'action_id' | 'args_digest' | 'workspace_digest'>,
  answer: 'approve' | 'reject',
  principal: string,
  reason?: string,
  messageId?: string,
): ApprovalSignal {
  return {
    action_id: p.action_id,
    decision: answer,
    args_digest: p.args_digest,
    workspace_digest: p.workspace_digest,
    principal,
    ...(reason ? { reason } : {}),
    ...(messageId ? { message_id: messageId } : {}),
  };
}

export function sendApproval(handle: RunHandle, approval: ApprovalSignal): Promise<void> {
  return handle.signal(approvalSignal, approval);
}

export function sendSteer(handle: RunHandle, message: string, messageId: string): Promise<void> {
  return handle.signal(steerSignal, { message, message_id: messageId });
}

export function sendInterrupt(handle: RunHandle, reason: string | undefined, messageId: string): Promise<void> {
  return handle.signal(interruptSignal, { ...(reason ? { reason } : {}), message_id: messageId });
}

/** Stops the run of a task as its parent's `stop_task` does; a run of its own records it ignored (it stops by a cancel request). */
export function sendStop(handle: RunHandle, reason: string, messageId: string): Promise<void> {
  return handle.signal(stopSignal, { reason, message_id: messageId });
}

/**
 * Stops a run from a client: a task's run by the `stop` Signal its parent would send (it ends
 * `cancelled` / `interrupted` and its parent hears of it), any other run by cancelling its workflow
 * (it ends `cancelled`, its tasks stopped with it). A repeat changes nothing: the Signal is taken
 * once by its message id, and a cancellation already asked for stays one.
 */
export async function stopRun(handle: RunHandle, reason: string, messageId: string): Promise<void> {
  // Whether it is a task's run is in its start input: read from history, with no worker needed.
  const input = await startInput<{ child?: unknown }>(handle);
  if (input?.child) return sendStop(handle, reason, messageId);
  await handle.cancel();
}

/**
 * What the run did with an approval of `actionId` sent after trace event `afterSeq`: the
 * `approval_recorded` or `approval_ignored` event, or null when neither came within `ms`.
 */
export async function approvalAnswer(handle: RunHandle, actionId: string, afterSeq: number, ms: number): Promise<TraceEvent | null> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    const events = (await queryTrace(handle, { after: afterSeq }, 3000).catch(() => null))?.events;
    const answer = events?.find(
      (e) => e.seq > afterSeq && e.action_id === actionId && (e.type === 'approval_recorded' || e.type === 'approval_ignored'),
    );
    if (answer) return answer;
    await new Promise((r) => setTimeout(r, 100));
  }
  return null;
}

export function evalProgress(handle: BatchHandle, ms = QUERY_DEADLINE_MS): Promise<EvalProgress> {
  return withDeadline(handle, ms, () => handle.query(evalProgressQuery));
}

export function evalResult(handle: BatchHandle): Promise<EvalResult> {
  return handle.result();
}
