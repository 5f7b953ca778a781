/**
 * agentRun: one coding-agent run as a deterministic workflow.
 *
 *   decide -> validate -> (plan | read | propose -> await approval -> write) -> observe
 *
 * with the limits checked before each decision, and `final` handed to the host verifier. Every
 * side effect is an activity; this file must stay free of I/O, clocks and randomness (the workflow
 * sandbox replaces Date with the deterministic workflow time, read only through workflowTime(); the
 * run's path reads it, and the history's figures, through its chains of local activities:
 * workflows/local-chain.ts). What a history decides, and where: docs/decisions.md.
 *
 * This file holds the run: its state and memory (one `RunState`, run-state.ts, and the few
 * scopes and counters no segment carries), its two entries (`execute`, `resume`), the loop
 * (`loop`, `runReply`, `toolCall`, `observe`), the turn's interrupts and small helpers. Each
 * other phase is a sibling module that reads the run through a small interface of its own, which
 * this class implements, and keeps none of the run's state (ending.ts holds only the two scopes a
 * stop cancels): startup.ts (the input's checks, loading, setup), decide.ts (a model turn, and
 * the budgets checked before it), writes.ts (the pending action: approval and write), ending.ts
 * (the scopes, verification, continue-as-new, the record), signals.ts (the Signals' and Queries'
 * handlers), subruns.ts (an orchestrating run's tasks); what they share is run-base.ts.
 */
import * as wf from '@temporalio/workflow';
import { isCancellation } from '@temporalio/workflow';
import type { BudgetUse } from '../core/budgets';
import {
  errorResult,
  runInputSchema,
  TERMINAL_STATUSES,
  type Budgets,
  type ParsedRunInput,
  type RunStatus,
  type ToolResult,
  type UnreceiptedChange,
} from '../core/contracts';
import { evaluatePolicy } from '../core/policy';
import type { RunOutcome, RunView } from '../core/run-view';
import { REASON_ATTRIBUTE, STATUS_ATTRIBUTE } from '../core/search-attributes';
import { Trace, type TurnState } from '../core/trace';
import { toolKind } from '../core/tools';
import { resultView, type CallView, type DecisionView } from '../core/transcript';
import { formatIssues } from '../core/validate';
import { taskUpdateSignal } from './messages';
import { Orchestration, type TaskOwner } from './subruns';
import { initialState, type PendingCall, type RunState } from './run-state';
import { RunMetrics } from './metrics';

export type { RunState };
import { Changes, LEGACY_CHANGES } from './changes';
import { LocalChains } from './local-chain';
import {
  ACTIVITY_OPTIONS,
  DEFAULT_HOST_LOST_S,
  hostActivities,
  interruptedResult,
  isElsewhere,
  isHostLost,
  local,
  RunStop,
  sharedQueue,
  TEST_ATTEMPTS,
} from './run-base';
import { Startup, type StartupRun } from './startup';
import { Decisions, type DecideRun } from './decide';
import { Writes, type WriteRun } from './writes';
import { Ending, type EndRun } from './ending';
import { Signals, type SignalRun } from './signals';
import type { Elsewhere, RunRef } from '../core/activities';

/** The run stores its trace once this much is held in workflow memory only. */
const TRACE_FLUSH_BYTES = 32 * 1024;
/** A live model's malformed calls in a row before the run ends `model_error`. */
const MAX_FORMAT_ERRORS = 3;
/** Distinct calls remembered between writes to tell a repeated call (a bound on the carried state). */
const MAX_RECENT_CALLS = 64;

/**
 * Local activities run inside one workflow task, and Signals, Queries, a cancellation and the
 * deadline's timer reach the run only between workflow tasks: after this many local activities
 * the run stores its trace (a regular activity, which ends the workflow task), so they wait for
 * at most that many. (A 1 ms timer would end it too, but the server fires short timers up to a
 * second late.)
 */
const LOCAL_ACTIVITIES_PER_TASK = 64;

export async function agentRun(rawInput: unknown, carried?: RunState): Promise<RunOutcome> {
  // Carried state comes only from this workflow's own continue-as-new; a client that passes it
  // could otherwise skip the loading checks (trust gate, isolation, endpoints).
  if (carried !== undefined && wf.workflowInfo().continuedFromExecutionRunId === undefined) {
    return new AgentRun().finish(
      new RunStop('failed', 'invalid_input', 'a run takes one argument, its input; carried state is only for continue-as-new'),
    );
  }
  const run = new AgentRun(carried);
  const parsed = runInputSchema.safeParse(rawInput);
  if (!parsed.success) {
    return run.finish(new RunStop('failed', 'invalid_input', formatIssues(parsed.error)));
  }
  return carried ? run.resume(parsed.data) : run.execute(parsed.data);
}

class AgentRun implements StartupRun, DecideRun, WriteRun, EndRun, SignalRun, TaskOwner {
  /** The run's state: one value, carried whole across continue-as-new. */
  readonly state: RunState;
  /** The trace: numbering, unstored events and a bounded window for queries. */
  trace: Trace;
  input!: ParsedRunInput;
  /** The activities of the host that holds the run; `hostLost` once it is found gone. */
  act = sharedQueue;
  hostLost = false;
  /** Local activities since the run last let its workflow task end (see LOCAL_ACTIVITIES_PER_TASK). */
  private localActivities = 0;
  /** The tasks of an orchestrating run. */
  readonly tasks: Orchestration;
  /** The running step an interrupt cuts off (a tool call, a task_status wait, verification), or null. */
  private callScope: wf.CancellationScope | null = null;
  /** Set as the run records its end: a message arriving later is not taken (nothing is left to take it). */
  ended = false;
  /** The governance metrics (not emitted while replaying). */
  readonly metrics = new RunMetrics();
  /** Which changes this segment's history holds: asked before any other command (workflows/changes.ts). */
  readonly changes = new Changes();
  /** The run's chains of local activities, and what reaches the run meanwhile (workflows/local-chain.ts). */
  readonly chains = new LocalChains(this.changes.current, this.changes.arrivalsSettled);
  /** Whether the last read-only step ran here as a local activity (not elsewhere's answer). */
  private ranLocally = false;
  /** The phases, each in its own module. */
  private readonly startup = new Startup(this);
  private readonly decisions = new Decisions(this);
  private readonly writes = new Writes(this);
  private readonly ending = new Ending(this);
  private readonly signals = new Signals(this);

  constructor(carried?: RunState) {
    this.state = carried ?? initialState(wf.workflowInfo().runId);
    this.trace = new Trace(this.state.trace);
    this.tasks = new Orchestration(this);
    this.signals.queries();
  }

  /**
   * The effect of something that reached the run (a Signal, a task's outcome or news, the
   * deadline's timer): now, or, while a chain of local activities is open, once its next step
   * has been issued (workflows/local-chain.ts).
   */
  receive(effect: () => void): void {
    this.chains.receive(effect);
  }

  /** The effect of what reached the run by a promise (a task's outcome, the deadline's timer): once the workflow task's promises have settled. */
  arrive(effect: () => void): void {
    this.chains.arrive(effect);
  }

  get view(): RunView {
    return this.state.view;
  }

  get ref(): RunRef {
    return this.state.ref!;
  }

  get budgets(): Budgets {
    return this.state.view.budgets!;
  }

  async execute(input: ParsedRunInput): Promise<RunOutcome> {
    this.input = input;
    this.state.prompt_messages = this.changes.has(LEGACY_CHANGES.messages);
    const child = input.child ?? null;
    const refused = this.startup.begin(input);
    this.signals.listen();
    if (refused) return this.finish(refused);
    // A task runs on the host that holds its parent's workspace.
    if (child) this.pinTo(child.host_queue);
    const stop = await this.ending.inRunScope(async () => {
      const loaded = await this.startup.load(input);
      if (loaded instanceof RunStop) return loaded;
      this.startup.adopt(input, loaded);
      return this.ending.withDeadline(async () => {
        const prepared = await this.act.prepareWorkspace.executeWithOptions(
          { startToCloseTimeout: loaded.repository ? '10 minutes' : '60 seconds', summary: `prepare workspace ${loaded.fixture.id}` },
          [
            {
              run_id: this.ref.run_id,
              fixture_dir: this.ref.fixture_dir,
              ...(child ? { from_run: child.from_run } : {}),
              ...(this.ref.repository ? { repository: this.ref.repository } : {}),
              ...(loaded.fork ? { fork: loaded.fork.plan } : {}),
            },
          ],
        );
        // A reopened task's workspace is its earlier run's as that run left it, not as first prepared.
        this.state.workspace_digest = child?.reopen ? null : prepared.workspace_digest;
        if (loaded.fork) this.trace.add('fork_restored', { workspace_digest: prepared.workspace_digest, writes: loaded.fork.writes });
        return (await this.startup.setup()) ?? this.loop();
      });
    });
    return this.finish(stop);
  }

  /** The next segment of a run that continued as new: the state it carried, the same workspace. */
  async resume(input: ParsedRunInput): Promise<RunOutcome> {
    this.input = input;
    // A segment of a run that began before the change takes it from its own start on.
    this.state.prompt_messages ??= this.changes.has(LEGACY_CHANGES.messages);
    this.signals.listen();
    this.pinTo(this.state.host_queue);
    const pending = this.state.pending_write;
    this.state.pending_write = null;
    this.setStatus(this.view.status);
    const stop = await this.ending.inRunScope(() =>
      this.ending.withDeadline(async () => {
        if (pending) this.observe(await this.writes.approveAndWrite(pending));
        return (await this.runReply(this.state.reply_rest, false)) ?? this.loop();
      }),
    );
    return this.finish(stop);
  }

  // ---- the loop: decide -> validate -> plan | read | propose (-> approval -> write) -> observe ----

  private async loop(): Promise<RunStop> {
    for (;;) {
      const limit = await this.decisions.limit();
      if (limit !== null) {
        if (limit === 'max_turns') await this.decisions.wrapUp();
        if (limit === 'max_cost_usd')
          this.view.cost_limit = { max_cost_usd: this.budgets.max_cost_usd!, spent_usd: this.used().cost_usd ?? 0, next_call_usd: null };
        return new RunStop('budget_exhausted', limit);
      }
      if (this.mayContinueAsNew()) await this.ending.continueAsNew(null);
      if (this.trace.unstoredBytes() > TRACE_FLUSH_BYTES) await this.ending.storeTrace();
      this.view.counters.turns++;
      const decisions = await this.decisions.decide(true);
      const fromLocal = this.state.source?.kind !== 'provider' && this.ranLocally;
      // An interrupt stops the turn it arrived in: a tool call it proposed is not executed.
      this.state.turn_interrupted = this.state.interrupted;
      this.state.interrupted = null;
      const stop = await this.runReply(decisions, fromLocal);
      if (stop !== null) return stop;
    }
  }

  /**
   * The decisions of one reply, in order. What is left of them is kept in `replyRest`, so a
   * continue-as-new during a write's approval carries the reply's remaining calls along.
   * `fromLocal`: the reply is a local activity's result, this code the code right after it.
   */
  private async runReply(decisions: DecisionView[], fromLocal: boolean): Promise<RunStop | null> {
    this.state.reply_rest = [...decisions];
    for (let decision = this.state.reply_rest.shift(); decision !== undefined; decision = this.state.reply_rest.shift()) {
      switch (decision.kind) {
        case 'plan':
          this.noteEmpty(decision.text);
          await this.noteReply(decision, fromLocal);
          this.state.plan = decision.text;
          this.trace.add('plan_recorded', { text: decision.text, ref: decision.ref });
          this.state.transcript.append.push({ decision: decision.ref, reply: decision.reply });
          break;
        case 'tool':
          this.observe(await this.toolCall(decision, this.turnInterrupt()));
          this.countFormatError(decision);
          break;
        case 'final': {
          this.noteEmpty(decision.text);
          await this.noteReply(decision, fromLocal);
          this.state.transcript.append.push({ decision: decision.ref, reply: decision.reply });
          const interrupted = this.state.prompt_messages ? this.turnInterrupt() : null;
          if (interrupted === null) return this.ending.verify(decision.text, decision.ref);
          this.finalInterrupted(interrupted, 'decision');
          return null;
        }
      }
    }
    return null;
  }

  // ---- tool calls ----

  private async toolCall(decision: Extract<DecisionView, { kind: 'tool' }>, interrupted: string | null): Promise<ToolResult> {
    const callId = decision.call?.call_id ?? decision.invalid!.call_id;
    this.trace.add('tool_proposed', { call: decision.raw, ref: decision.ref }, { call_id: callId });
    this.state.in_flight = { call_id: callId, decision_ref: decision.ref, reply: decision.reply };
    // A reply with more calls than the budget has left: the rest get a result and do not run.
    if (this.used().tool_calls >= this.budgets.max_tool_calls)
      return errorResult(callId, 'interrupted', { reason: 'not executed: max_tool_calls reached' });
    this.view.counters.tool_calls++;
    this.metrics.toolCall(decision.call?.name ?? null);
    if (decision.call === null) return decision.invalid;
    const call = decision.call;
    this.noteRepeat(call);
    if (interrupted !== null) return interruptedResult(callId, interrupted);
    // The table's kind decides who carries the call out (core/tools.ts).
    const kind = toolKind(call.name);
    if (kind === 'write') return this.writes.patch(decision.ref, decision.reply, call, evaluatePolicy(call, call.path, this.ref.fixture));
    if (kind === 'orchestration') {
      const orchestrate = () => this.tasks.call(decision.ref, decision.reply, call);
      // Of these only task_status's wait is cut off: the others start, signal or write.
      if (call.name !== 'task_status') return orchestrate();
      return (await this.interruptible(orchestrate)) ?? interruptedResult(callId, this.takeInterrupt(), 'cut off');
    }
    // The call's own limit only: the deadline is the workflow timer's, which cancels the call, so
    // a call cut by the deadline gets the harness's result rather than a tool timeout.
    const timeout = this.budgets.call_timeout_s * 1000;
    const options = {
      startToCloseTimeout: timeout + 5000,
      cancellationType: wf.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
      summary: summarize(call),
    };
    const attempts = kind === 'test' ? { retry: { ...ACTIVITY_OPTIONS.retry, maximumAttempts: TEST_ATTEMPTS } } : {};
    const remote = () =>
      this.act.executeTool.executeWithOptions({ ...options, ...attempts, heartbeatTimeout: '10 seconds' }, [this.ref, call, timeout]);
    // A read-only call a replay's decision came with has run already (core/activities.ts, `read_ahead`).
    const result =
      kind === 'read' && decision.ran
        ? decision.ran
        : await this.interruptible(() =>
            kind === 'read'
              ? this.readOnly(() => local.localTool.executeWithOptions(options, [this.state.host_queue, this.ref, call, timeout]), remote)
              : remote(),
          );
    // Cut off by an interrupt: a test run's process tree is gone (the activity waits for that).
    if (result === null) return interruptedResult(callId, this.takeInterrupt(), 'cut off');
    if (kind === 'test' && result.error === 'tests_failed' && !this.state.wrote_writable) this.view.red_observed = true;
    if (result.unreceipted) this.unreceipted(result.unreceipted, callId);
    return result;
  }

  /** A test or acceptance process changed the workspace: the change was undone; traced and counted. */
  unreceipted(change: UnreceiptedChange, callId?: string): void {
    this.trace.add('unreceipted_change', change, callId ? { call_id: callId } : {});
    this.view.counters.unreceipted_changes = (this.view.counters.unreceipted_changes ?? 0) + 1;
  }

  /**
   * The one result of the call in flight: traced and added to the transcript, and counted in
   * `tool_errors` unless the harness made it up because the run ended (the model never saw it).
   */
  observe(result: ToolResult & { ref?: string | null; tests_ref?: string }, counted = true): void {
    if (counted && result.error !== null) this.view.tool_errors[result.error] = (this.view.tool_errors[result.error] ?? 0) + 1;
    if (counted) this.metrics.toolResult(result);
    const view = resultView(result, result.ref ?? null);
    this.trace.add('tool_observed', result.tests_ref ? { ...view, tests_ref: result.tests_ref } : view, { call_id: result.call_id });
    const inFlight = this.state.in_flight;
    this.state.in_flight = null;
    if (inFlight !== null) {
      this.state.transcript.append.push({
        decision: inFlight.decision_ref,
        reply: inFlight.reply,
        result: view.ref !== null ? { ref: view.ref } : { inline: result },
      });
    }
  }

  // ---- the turn's interrupts and counters ----

  /**
   * A reply's text as the turn's end for a client of the event stream: the text as history holds
   * it (cut when long) and the stored decision, which holds it whole. A history of a build that
   * asked `reply-event` here, right after the decision's local activity, may hold its marker in
   * the next workflow task (workflows/changes.ts, `hasAfterLocal`): such a build had `turn-state`.
   */
  private async noteReply(decision: { text: string; ref: string }, fromLocal: boolean): Promise<void> {
    const askedAfterLocal = fromLocal && this.changes.took(LEGACY_CHANGES.turnState);
    if (await this.changes.hasAfterLocal(LEGACY_CHANGES.replyEvent, askedAfterLocal))
      this.trace.add('model_replied', { turn: this.view.counters.turns, text: decision.text, text_ref: decision.ref });
  }

  /**
   * The interrupt of the turn running now. One that arrived while the reply was awaited is taken
   * in `loop`; one that arrives while the reply's decisions are carried out stops the rest of
   * them (a run that began before `prompt_messages` took it at its next decision).
   */
  private turnInterrupt(): string | null {
    if (this.state.prompt_messages && this.state.interrupted !== null) this.takeInterrupt();
    return this.state.turn_interrupted;
  }

  /** Takes the interrupt that arrived for the turn running now: the rest of the turn does not run. */
  takeInterrupt(): string {
    const reason = this.state.interrupted ?? 'interrupted';
    this.state.interrupted = null;
    if (this.state.prompt_messages) this.state.turn_interrupted = reason;
    return reason;
  }

  /**
   * An interrupt reached a `final` while it was decided or verified: it is not verified, the run
   * goes on, and the next request says why.
   */
  finalInterrupted(reason: string, during: 'decision' | 'verification'): void {
    this.view.final_summary = null;
    this.trace.add('final_interrupted', { reason, during });
    this.state.steering.push(`interrupt: ${reason} (your final answer was not verified)`);
  }

  /**
   * Runs a step an interrupt cuts off at once (a tool call's activity, a task_status wait,
   * verification): null when it did, with the interrupt taken for the turn. A stop, a cancel
   * request or the deadline cancels the scopes around it too, and goes on up. A run that began
   * before `prompt_messages` waits for the step.
   */
  async interruptible<T>(step: () => Promise<T>): Promise<T | null> {
    if (!this.state.prompt_messages) return step();
    const scope = new wf.CancellationScope();
    this.callScope = scope;
    try {
      return await scope.run(step);
    } catch (err) {
      if (!isCancellation(err) || this.state.interrupted === null || wf.CancellationScope.current().consideredCancelled) throw err;
      return null;
    } finally {
      this.callScope = null;
    }
  }

  /** A reply that says nothing: neither a call nor any text. */
  private noteEmpty(text: string): void {
    if (text.trim() === '') this.view.counters.empty_replies = (this.view.counters.empty_replies ?? 0) + 1;
  }

  /**
   * A call identical to one made since the last write could only get the same answer. A run that
   * began before identities were kept (carried state, old histories) has neither list nor counter.
   */
  private noteRepeat(call: CallView): void {
    if (call.identity === undefined) return;
    this.state.recent_calls ??= [];
    if (this.state.recent_calls.includes(call.identity)) this.view.counters.repeated_calls = (this.view.counters.repeated_calls ?? 0) + 1;
    else if (this.state.recent_calls.length < MAX_RECENT_CALLS) this.state.recent_calls.push(call.identity);
  }

  /** A live model that keeps sending calls that do not parse is stopped after three in a row. */
  private countFormatError(decision: Extract<DecisionView, { kind: 'tool' }>): void {
    if (this.state.source?.kind !== 'provider') return;
    const format = decision.invalid !== null && (decision.invalid.error === 'invalid_fields' || decision.invalid.error === 'unknown_tool');
    this.state.format_errors = format ? this.state.format_errors + 1 : 0;
    if (this.state.format_errors > MAX_FORMAT_ERRORS)
      throw new RunStop('failed', 'model_error', `more than ${MAX_FORMAT_ERRORS} malformed calls in a row`);
  }

  // ---- small helpers ----

  /** Where the run stands now: replay cursor, workspace digest, transcript (see TurnState). */
  turnState(): TurnState {
    const { head, append } = this.state.transcript;
    return {
      cursor: this.state.cursor,
      workspace_digest: this.state.workspace_digest ?? null,
      transcript: { head, pending: append.length },
    };
  }

  pinTo(queue: string | null): void {
    this.state.host_queue = queue;
    this.act = hostActivities(queue, this.input.host_lost_s);
  }

  /** A read-only step: the local activity's answer, or the run's host's when it ran elsewhere. */
  async readOnly<T extends object>(here: () => Promise<T | Elsewhere>, onHost: () => Promise<T>): Promise<T> {
    if (++this.localActivities > LOCAL_ACTIVITIES_PER_TASK) {
      this.localActivities = 1;
      await this.ending.storeTrace();
    }
    const answer = await this.chains.run(here);
    this.ranLocally = !isElsewhere(answer);
    return isElsewhere(answer) ? onHost() : answer;
  }

  /** Runs a host activity outside the deadline scope; null when the host is gone. */
  async onHost<T>(fn: () => Promise<T>): Promise<T | null> {
    try {
      return await fn();
    } catch (err) {
      if (!this.noteHostLost(err)) throw err;
      return null;
    }
  }

  /** True (and remembered) when `err` says the run's host is gone. */
  noteHostLost(err: unknown): boolean {
    const lost = isHostLost(err);
    if (lost) this.hostLost = true;
    return lost;
  }

  hostLostDetail(): string {
    return `no worker of ${this.state.host_queue ?? 'the shared queue'} took the run's next task within ${this.input.host_lost_s ?? DEFAULT_HOST_LOST_S} s: the host that holds the workspace is gone`;
  }

  setStatus(status: RunStatus): void {
    const changed = this.view.status !== status;
    this.view.status = status;
    // A task's run tells its parent how it is doing; its outcome goes back as its result.
    const parent = this.view.parent;
    if (parent !== null && changed && !TERMINAL_STATUSES.has(status)) {
      const update = { task_id: parent.task_id, status, pending_path: this.view.pending_approval?.path ?? null, run_id: this.view.run_id };
      void wf
        .getExternalWorkflowHandle(parent.workflow_id)
        .signal(taskUpdateSignal, update)
        .catch(() => undefined);
    }
    wf.upsertSearchAttributes([
      { key: STATUS_ATTRIBUTE, value: status },
      ...(TERMINAL_STATUSES.has(status) && this.view.reason ? [{ key: REASON_ATTRIBUTE, value: this.view.reason }] : []),
    ]);
  }

  /** Ends a wait for a person: the time it took is added to the deadline. */
  resumeDeadline(): void {
    if (this.state.waiting_since === null) return;
    this.state.deadline_at += this.now() - this.state.waiting_since;
    this.state.waiting_since = null;
  }

  /** Temporal suggests a new segment, and no task runs (its outcome would be lost with this segment). */
  mayContinueAsNew(): boolean {
    return this.chains.figures().continueAsNewSuggested && !this.tasks.active();
  }

  /** The run path's clock: as of the open chain's start while one is open (workflows/local-chain.ts). */
  now(): number {
    return this.chains.now();
  }

  msLeft(): number {
    return this.state.deadline_at - this.now();
  }

  // ---- the phases' steps the others call ----

  finish(stop: RunStop): Promise<RunOutcome> {
    return this.ending.finish(stop);
  }

  used(held = true): BudgetUse {
    return this.decisions.used(held);
  }

  continueAsNew(pendingCall: PendingCall | null): Promise<never> {
    return this.ending.continueAsNew(pendingCall);
  }

  approveAndWrite(pending: PendingCall): Promise<ToolResult> {
    return this.writes.approveAndWrite(pending);
  }

  beforeFirstWrite(): Promise<void> {
    return this.writes.beforeFirstWrite();
  }

  onApproval(payload: unknown): void {
    this.writes.onApproval(payload);
  }

  repeated(id: unknown): boolean {
    return this.signals.repeated(id);
  }

  cancelWork(): void {
    this.ending.cancelWork();
  }

  cancelCall(): void {
    this.callScope?.cancel();
  }
}

function summarize(call: CallView): string {
  return call.path !== null ? `${call.name} ${call.path}` : call.name;
}
