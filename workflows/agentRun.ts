/**
 * agentRun: one coding-agent run as a deterministic workflow.
 *
 *   decide -> validate -> (plan | read | propose -> await approval -> write) -> observe
 *
 * with the limits checked before each decision, and `final` handed to the host verifier. Every
 * side effect is an activity; this file must stay free of I/O, clocks and randomness (the workflow
 * sandbox replaces Date.now() with the deterministic workflow time).
 */
import * as wf from '@temporalio/workflow';
import { ApplicationFailure, isCancellation } from '@temporalio/workflow';
import type { Activities, RunRef } from '../activities';
import type { DecideResult, HistoryEntry } from '../activities/decisions';
import { budgetStop, callTimeoutMs, effectiveBudgets } from '../core/budgets';
import {
  approvalSignalSchema,
  errorResult,
  okResult,
  runInputSchema,
  TERMINAL_STATUSES,
  type ApprovalSignal,
  type Budgets,
  type Decision,
  type ParsedRunInput,
  type PreparedAction,
  type RunRecord,
  type RunStatus,
  type ToolResult,
} from '../core/contracts';
import { APPROVAL_POLICIES, evaluatePolicy, type PolicyEvaluation } from '../core/policy';
import { buildRecord, type RunView } from '../core/run-view';
import { FIXTURE_ATTRIBUTE, REASON_ATTRIBUTE, STATUS_ATTRIBUTE } from '../core/search-attributes';
import { toolDefinitions, type ApplyPatchArgs, type ValidCall } from '../core/tools';
import { Trace, type TraceEvent } from '../core/trace';
import { validateCall } from '../core/validate';

export const approvalSignal = wf.defineSignal<[unknown]>('approval');
export const interruptSignal = wf.defineSignal<[{ reason?: string }?]>('interrupt');
export const steerSignal = wf.defineSignal<[{ message: string }]>('steer');
export const stateQuery = wf.defineQuery<RunView>('state');
export const traceQuery = wf.defineQuery<TraceEvent[]>('trace');

/** The workflow's result: everything `status` and `trace` show, readable without a worker. */
export interface RunOutcome {
  record: RunRecord;
  state: RunView;
  trace: TraceEvent[];
}

const MAX_MODEL_RETRIES = 2;

/** Reasons for non-retryable activity failures, by ApplicationFailure type. */
const ACTIVITY_FAILURE_REASONS: Record<string, string> = {
  InfrastructureError: 'infrastructure_error',
  ReplayFileError: 'model_error',
  ProviderUnavailable: 'model_error',
};

const quick = wf.proxyActivities<Activities>({
  startToCloseTimeout: '10 seconds',
  retry: { initialInterval: '500 milliseconds', maximumInterval: '5 seconds' },
});

/** Ends the loop with a terminal status; thrown from helpers, caught once in the main function. */
class RunStop {
  constructor(
    readonly status: RunStatus,
    readonly reason: string,
    readonly detail: string | null = null,
  ) {}
}

export async function agentRun(rawInput: unknown): Promise<RunOutcome> {
  const run = new AgentRun();
  const parsed = runInputSchema.safeParse(rawInput);
  if (!parsed.success) {
    return run.finish(new RunStop('failed', 'invalid_input', parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')));
  }
  return run.execute(parsed.data);
}

class AgentRun {
  private readonly trace = new Trace();
  private readonly history: HistoryEntry[] = [];
  private readonly view: RunView = {
    fixture: null,
    replay: null,
    backend: 'local',
    approver: 'interactive',
    status: 'running',
    reason: null,
    detail: null,
    budgets: null,
    counters: { turns: 0, tool_calls: 0, writes: 0, receipts: 0, model_retries: 0 },
    tool_errors: {},
    red_observed: false,
    pending_approval: null,
    verification: null,
    isolation: null,
    diff_paths: [],
    wrap_up: null,
    deadline_reached: false,
  };
  private input!: ParsedRunInput;
  private ref!: RunRef;
  private budgets!: Budgets;
  private deadlineAt = 0;
  private approval: ApprovalSignal | null = null;
  private interrupted: string | null = null;
  private steering: string[] = [];
  private wroteWritable = false;

  constructor() {
    wf.setHandler(stateQuery, () => this.view);
    wf.setHandler(traceQuery, () => this.trace.events);
    wf.setHandler(approvalSignal, (payload) => this.onApproval(payload));
    wf.setHandler(interruptSignal, (payload) => {
      this.interrupted = payload?.reason ?? 'interrupted by the user';
      this.trace.add('interrupt_received', { reason: this.interrupted });
    });
    wf.setHandler(steerSignal, (payload) => {
      const message = typeof payload?.message === 'string' ? payload.message : '';
      if (message === '') return;
      this.steering.push(message);
      this.trace.add('steer_received', { message });
    });
  }

  async execute(input: ParsedRunInput): Promise<RunOutcome> {
    this.input = input;
    this.view.backend = input.backend;
    this.view.approver = input.approver;
    this.trace.add('run_started', { source: input.source.kind, backend: input.backend, approver: input.approver });
    const policyName = input.approver.startsWith('policy:') ? input.approver.slice('policy:'.length) : null;
    if (policyName !== null && !(policyName in APPROVAL_POLICIES)) {
      return this.finish(new RunStop('failed', 'invalid_input', `unknown approval policy ${input.approver}`));
    }
    // Nothing is created, and no key is read, before the fixture, the decision source, the trust
    // gate and the sandbox check out.
    const loaded = await quick.loadRun(input);
    if (!loaded.ok) return this.finish(new RunStop('failed', loaded.reason, loaded.detail));
    if (input.backend === 'docker') {
      const evidence = await quick.checkIsolation.executeWithOptions({ startToCloseTimeout: '3 minutes', summary: 'probe sandbox isolation' }, []);
      this.view.isolation = evidence;
      this.trace.add('isolation_checked', evidence);
      if (!evidence.verified) {
        const failed = Object.entries(evidence.checks).filter(([, c]) => !c.ok).map(([name]) => name);
        return this.finish(new RunStop('failed', 'isolation_unverified', evidence.reason_detail ?? `probe checks failed: ${failed.join(', ')}`));
      }
    }
    if (input.source.kind === 'provider' && !(input.backend === 'docker' && this.view.isolation?.verified)) {
      return this.finish(new RunStop('failed', 'isolation_unverified', 'a live model provider runs only on the docker backend with verified isolation'));
    }
    this.view.fixture = loaded.fixture.id;
    this.view.replay = loaded.replay;
    this.budgets = effectiveBudgets(loaded.fixture.budgets, input.budgets);
    this.view.budgets = this.budgets;
    this.deadlineAt = Date.now() + this.budgets.deadline_s * 1000;
    this.ref = { run_id: wf.workflowInfo().runId, fixture: loaded.fixture, fixture_dir: loaded.fixture_dir, backend: input.backend };
    wf.upsertSearchAttributes([{ key: FIXTURE_ATTRIBUTE, value: loaded.fixture.id }]);
    this.setStatus('running');

    const stop = await this.withDeadline(async () => {
      await quick.prepareWorkspace.executeWithOptions(
        { startToCloseTimeout: '60 seconds', summary: `prepare workspace ${loaded.fixture.id}` },
        [{ run_id: this.ref.run_id, fixture_dir: this.ref.fixture_dir }],
      );
      return this.loop();
    });
    return this.finish(stop);
  }

  // ---- the loop ----

  private async loop(): Promise<RunStop> {
    for (;;) {
      const limit = budgetStop(this.budgets, this.view.counters, this.msLeft());
      if (limit !== null) {
        if (limit === 'max_turns') await this.wrapUp();
        return new RunStop('budget_exhausted', limit);
      }
      this.view.counters.turns++;
      const decision = await this.decide(true);
      // An interrupt stops the turn it arrived in: a tool call it proposed is not executed.
      const interrupted = this.interrupted;
      this.interrupted = null;
      switch (decision.kind) {
        case 'plan':
          this.trace.add('plan_recorded', { text: decision.text });
          this.history.push({ decision });
          break;
        case 'tool': {
          const result = await this.toolCall(decision.call, interrupted);
          this.history.push({ decision, result });
          break;
        }
        case 'final':
          this.history.push({ decision });
          return this.verify(decision.text);
      }
    }
  }

  /** Asks the decision source, retrying transient provider errors at most twice. */
  private async decide(toolsEnabled: boolean): Promise<Exclude<Decision, { kind: 'model_error' }>> {
    for (let retries = 0; ; retries++) {
      const messages = this.steering.splice(0);
      for (const message of messages) this.history.push({ message });
      this.trace.add('model_requested', { turn: this.view.counters.turns, tools_enabled: toolsEnabled, messages });
      const result: DecideResult = await quick.decide.executeWithOptions(
        { startToCloseTimeout: callTimeoutMs(this.budgets, this.msLeft()), summary: `decide turn ${this.view.counters.turns}` },
        [{ source: this.input.source, task: this.ref.fixture.task, tools: toolsEnabled ? toolDefinitions() : [], history: this.history, tools_enabled: toolsEnabled }],
      );
      if (result.kind === 'exhausted') throw new RunStop('failed', 'replay_exhausted', 'the replay has no decision left');
      const decision = result.decision;
      if (decision.kind !== 'model_error') return decision;
      this.history.push({ decision });
      if (!decision.transient) throw new RunStop('failed', 'model_error', 'the decision source failed permanently');
      if (retries >= MAX_MODEL_RETRIES) throw new RunStop('failed', 'model_error', `transient errors persisted after ${MAX_MODEL_RETRIES} retries`);
      this.view.counters.model_retries++;
      this.trace.add('model_retry', { attempt: retries + 1 });
    }
  }

  /** After the turn limit: one more decision with tools disabled, kept as the run's summary. */
  private async wrapUp(): Promise<void> {
    try {
      const decision = await this.decide(false);
      if (decision.kind === 'final') {
        this.view.wrap_up = decision.text;
        this.history.push({ decision });
      }
      this.trace.add('wrap_up_recorded', { summary: this.view.wrap_up });
    } catch (err) {
      if (!(err instanceof RunStop)) throw err;
      this.trace.add('wrap_up_recorded', { summary: null, error: err.reason });
    }
  }

  // ---- tool calls ----

  private async toolCall(raw: unknown, interrupted: string | null): Promise<ToolResult> {
    this.view.counters.tool_calls++;
    const validation = validateCall(raw, `call-${this.view.counters.turns}`);
    const callId = validation.ok ? validation.call.call_id : validation.result.call_id;
    this.trace.add('tool_proposed', { call: raw }, { call_id: callId });
    if (!validation.ok) return this.observe(validation.result);
    const call = validation.call;
    if (interrupted !== null) return this.observe(this.interruptedResult(callId, interrupted));
    if (call.name === 'apply_patch') return this.observe(await this.patch(call.call_id, call.arguments, evaluatePolicy(call, call.arguments.path, this.ref.fixture)));
    const timeout = callTimeoutMs(this.budgets, this.msLeft());
    const result = await quick.executeTool.executeWithOptions(
      {
        startToCloseTimeout: timeout + 5000,
        heartbeatTimeout: '10 seconds',
        cancellationType: wf.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        summary: summarize(call),
      },
      [this.ref, call, timeout],
    );
    if (call.name === 'run_tests' && result.error === 'tests_failed' && !this.wroteWritable) this.view.red_observed = true;
    return this.observe(result);
  }

  private interruptedResult(callId: string, reason: string): ToolResult {
    return errorResult(callId, 'interrupted', { reason: `not executed: ${reason}` });
  }

  private observe(result: ToolResult): ToolResult {
    if (result.error !== null) this.view.tool_errors[result.error] = (this.view.tool_errors[result.error] ?? 0) + 1;
    this.trace.add('tool_observed', result, { call_id: result.call_id });
    return result;
  }

  /** prepare -> approve -> write, each write keyed by its action_id. */
  private async patch(callId: string, args: ApplyPatchArgs, policy: PolicyEvaluation): Promise<ToolResult> {
    if (policy.decision === 'deny') {
      return errorResult(callId, 'write_denied', { path: args.path, rules: policy.matched.filter((r) => r.decision === 'deny') });
    }
    const prepared = await quick.preparePatch.executeWithOptions({ summary: `prepare apply_patch ${args.path}` }, [this.ref, callId, args]);
    if (prepared.kind === 'rejected') return prepared.result;
    if (prepared.kind === 'already_written') {
      const { action_id, before, after } = prepared;
      return okResult(callId, { action_id, path: args.path, before, after, already_written: true });
    }
    const action = prepared.action;
    const decision = await this.awaitApproval(callId, action, policy);
    if (decision === 'interrupted') {
      const reason = this.interrupted ?? 'interrupted';
      this.interrupted = null;
      return this.interruptedResult(callId, reason);
    }
    if (decision.decision === 'reject') {
      return errorResult(callId, 'approval_rejected', { action_id: action.action_id, principal: decision.principal ?? null, reason: decision.reason ?? null });
    }
    const outcome = await quick.writePatch.executeWithOptions({ summary: `apply_patch ${args.path}` }, [this.ref, action, args]);
    const ids = { call_id: callId, action_id: action.action_id };
    switch (outcome.kind) {
      case 'approval_stale':
        return errorResult(callId, 'approval_stale', { action_id: action.action_id, path: args.path });
      case 'recovery_uncertain':
        throw new RunStop('failed', 'recovery_uncertain', `${args.path} matches neither the digest before nor after action ${action.action_id}`);
      default:
        this.view.counters.writes++;
        this.trace.add('action_written', { path: action.path, before: action.before, after: action.after, recovered: outcome.recovered }, ids);
        this.view.counters.receipts++;
        this.trace.add('action_receipt', { path: action.path }, ids);
        if (this.ref.fixture.writable.includes(action.path)) this.wroteWritable = true;
        return okResult(callId, { action_id: action.action_id, path: action.path, before: action.before, after: action.after });
    }
  }

  /** Waits durably for the Signal bound to this action, or asks the named policy. */
  private async awaitApproval(callId: string, action: PreparedAction, policy: PolicyEvaluation): Promise<ApprovalSignal | 'interrupted'> {
    const { action_id, path, before, after, args_digest, workspace_digest } = action;
    this.trace.add('approval_requested', { path, before, after, args_digest, workspace_digest, diff: action.diff }, { call_id: callId, action_id });
    const approver = this.input.approver;
    if (approver.startsWith('policy:')) {
      const decision = APPROVAL_POLICIES[approver.slice('policy:'.length)](policy);
      const signal: ApprovalSignal = { action_id, decision, args_digest, workspace_digest, principal: approver };
      this.trace.add('approval_recorded', { decision, principal: approver, args_digest, workspace_digest }, { call_id: callId, action_id });
      return signal;
    }
    this.approval = null;
    this.view.pending_approval = { ...action, call_id: callId };
    this.setStatus('awaiting_approval');
    // No worker resources are held while waiting: this is a durable condition on workflow state.
    await wf.condition(() => this.approval !== null || this.interrupted !== null);
    const decision = this.approval;
    this.view.pending_approval = null;
    this.approval = null;
    this.setStatus('running');
    return decision ?? 'interrupted';
  }

  private onApproval(payload: unknown): void {
    const parsed = approvalSignalSchema.safeParse(payload);
    const pending = this.view.pending_approval;
    const ignore = (why: string, actionId?: string) => this.trace.add('approval_ignored', { reason: why }, actionId ? { action_id: actionId } : {});
    if (!parsed.success) return void ignore(`invalid approval payload: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
    const signal = parsed.data;
    if (pending === null || this.approval !== null) return void ignore('no approval is pending', signal.action_id);
    if (signal.action_id !== pending.action_id) return void ignore('action_id does not match the pending action', signal.action_id);
    if (signal.args_digest !== pending.args_digest || signal.workspace_digest !== pending.workspace_digest) {
      return void ignore('digests do not match the pending action', signal.action_id);
    }
    this.approval = signal;
    this.trace.add(
      'approval_recorded',
      { decision: signal.decision, principal: signal.principal ?? null, reason: signal.reason ?? null, args_digest: signal.args_digest, workspace_digest: signal.workspace_digest },
      { call_id: pending.call_id, action_id: signal.action_id },
    );
  }

  // ---- verification and the end ----

  private async verify(finalText: string): Promise<RunStop> {
    this.setStatus('verifying');
    this.trace.add('verification_started', { final: finalText });
    const timeout = Math.max(1000, this.msLeft());
    const findings = await quick.verify.executeWithOptions(
      {
        startToCloseTimeout: timeout,
        heartbeatTimeout: '10 seconds',
        cancellationType: wf.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        summary: 'verify',
      },
      [this.ref, timeout],
    );
    this.view.verification = findings;
    if (findings.passed) {
      this.trace.add('verification_passed', findings);
      return new RunStop('completed', '');
    }
    this.trace.add('verification_failed', findings);
    return new RunStop('failed', findings.acceptance.error !== null ? 'verification_error' : 'verification_failed', findings.acceptance.error);
  }

  /**
   * Runs `body` under the run's deadline (a workflow timer). When the deadline and an external
   * cancellation coincide, both are kept and the reason is `cancelled`.
   */
  private async withDeadline(body: () => Promise<RunStop>): Promise<RunStop> {
    const loopScope = new wf.CancellationScope();
    const timerScope = new wf.CancellationScope();
    timerScope
      .run(() => wf.sleep(this.msLeft()))
      .then(() => {
        this.view.deadline_reached = true;
        loopScope.cancel();
      })
      .catch(() => undefined); // the timer is cancelled when the body ends first
    try {
      return await loopScope.run(body);
    } catch (err) {
      if (err instanceof RunStop) return err;
      if (isCancellation(err)) {
        if (wf.CancellationScope.current().consideredCancelled) return new RunStop('cancelled', 'cancelled', this.view.deadline_reached ? 'the deadline was also reached' : null);
        if (this.view.deadline_reached) return new RunStop('budget_exhausted', 'deadline');
      }
      // A non-retryable activity failure still ends the run with a status and a reason.
      if (err instanceof wf.ActivityFailure && err.cause instanceof ApplicationFailure) {
        const reason = ACTIVITY_FAILURE_REASONS[err.cause.type ?? ''] ?? 'activity_failed';
        return new RunStop('failed', reason, err.cause.message);
      }
      throw err;
    } finally {
      timerScope.cancel();
    }
  }

  /**
   * Records the terminal status. A cancelled run also returns normally (Temporal shows it as
   * completed, the AgentStatus search attribute as cancelled), so its record and trace stay in
   * its result.
   */
  async finish(stop: RunStop): Promise<RunOutcome> {
    await wf.CancellationScope.nonCancellable(async () => {
      if (this.view.verification === null && this.ref) this.view.diff_paths = await quick.diffPaths({ run_id: this.ref.run_id });
    });
    this.view.pending_approval = null;
    this.view.reason = stop.reason === '' ? null : stop.reason;
    this.view.detail = stop.detail;
    this.setStatus(stop.status);
    const record = buildRecord(this.view);
    this.trace.add('run_finished', { status: stop.status, reason: this.view.reason, detail: stop.detail, deadline_reached: this.view.deadline_reached });
    return { record, state: this.view, trace: this.trace.events };
  }

  // ---- small helpers ----

  private setStatus(status: RunStatus): void {
    this.view.status = status;
    wf.upsertSearchAttributes([
      { key: STATUS_ATTRIBUTE, value: status },
      ...(TERMINAL_STATUSES.has(status) && this.view.reason ? [{ key: REASON_ATTRIBUTE, value: this.view.reason }] : []),
    ]);
  }

  private msLeft(): number {
    return this.deadlineAt - Date.now();
  }
}

function summarize(call: ValidCall): string {
  switch (call.name) {
    case 'read_file':
      return `read_file ${call.arguments.path}`;
    case 'search':
      return `search ${JSON.stringify(call.arguments.query).slice(0, 60)}`;
    default:
      return call.name;
  }
}
