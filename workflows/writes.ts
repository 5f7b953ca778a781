/**
 * agentRun's writes: the pending action from its preparation to its receipt. `patch` prepares an
 * apply_patch (policy first) and asks for approval; `approveAndWrite` waits for it (a person's
 * `approval` Signal, taken by `onApproval`, or a named policy) and makes the write, a patch or a
 * task's merge, each keyed by its action_id; `beforeFirstWrite` runs the candidate tests at the
 * base once, before the first write is asked for. It touches the run's state and trace through
 * `WriteRun`; the write that waits when the run continues as new is `state.pending_write`.
 */
import * as wf from '@temporalio/workflow';
import { isCancellation } from '@temporalio/workflow';
import { BUDGET_DEFAULTS } from '../core/budgets';
import { approvalSignalSchema, errorResult, okResult, type ApprovalSignal, type ToolResult } from '../core/contracts';
import { APPROVAL_POLICIES, endsRedWindow, parseApprover, type PolicyEvaluation } from '../core/policy';
import { brief, type CallView } from '../core/transcript';
import { formatIssues } from '../core/validate';
import type { MergeOutcome, WriteOutcome, Written } from '../core/activities';
import { interruptedResult, Phase, RunStop, testStepOptions, type RunBase } from './run-base';
import type { PendingCall } from './run-state';

/** How long the base run of the tests may take beyond the tests' own timeout (copying the tree, reading the report). */
const BASELINE_MARGIN_MS = 60_000;
/** How long a write waits for a person by default: 7 days. */
const DEFAULT_APPROVAL_TIMEOUT_S = BUDGET_DEFAULTS.approval_timeout_s;

/** What the write path needs of the run beyond `RunBase`. */
export interface WriteRun extends RunBase {
  /** Takes the interrupt that arrived for the turn running now. */
  takeInterrupt(): string;
  /** Temporal suggests a new segment, and no task runs. */
  mayContinueAsNew(): boolean;
  /** Continues as new, the pending action carried. */
  continueAsNew(pendingCall: PendingCall | null): Promise<never>;
  /** Ends a wait for a person: the time it took is added to the deadline. */
  resumeDeadline(): void;
  /** True when a client message with this id was taken before. */
  repeated(id: unknown): boolean;
  /** True (and remembered) when `err` says the run's host is gone. */
  noteHostLost(err: unknown): boolean;
}

export class Writes extends Phase<WriteRun> {
  /** prepare -> approve -> write, each write keyed by its action_id. */
  async patch(decisionRef: string, reply: string | null, call: CallView, policy: PolicyEvaluation): Promise<ToolResult> {
    const path = call.path!;
    if (policy.decision === 'deny') {
      return errorResult(call.call_id, 'write_denied', { path, rules: policy.matched.filter((r) => r.decision === 'deny') });
    }
    const prepared = await this.act.preparePatch.executeWithOptions({ summary: `prepare apply_patch ${path}` }, [this.ref, call]);
    if (prepared.kind === 'rejected') return prepared.result;
    if (prepared.kind === 'already_written') {
      const { action_id, before, after } = prepared;
      return okResult(call.call_id, { action_id, path, before, after, already_written: true });
    }
    const { action } = prepared;
    const { action_id, before, after, args_digest, workspace_digest } = action;
    await this.beforeFirstWrite();
    this.trace.add(
      'approval_requested',
      { path, before, after, args_digest, workspace_digest, diff: brief(action.diff), diff_bytes: action.diff.length },
      { call_id: call.call_id, action_id },
    );
    return this.approveAndWrite({ decision_ref: decisionRef, reply, call, action, policy });
  }

  /** Approval, then the write (a patch, or a task's merge), each keyed by its action_id. */
  async approveAndWrite(pending: PendingCall): Promise<ToolResult> {
    const { call, action } = pending;
    const approval = await this.awaitApproval(pending);
    if (approval === 'interrupted') return interruptedResult(call.call_id, this.run.takeInterrupt());
    if (approval.decision === 'reject') {
      return errorResult(call.call_id, 'approval_rejected', {
        action_id: action.action_id,
        principal: approval.principal ?? null,
        reason: approval.reason ?? null,
      });
    }
    const write = (): Promise<(WriteOutcome | MergeOutcome) & Written> =>
      pending.merge
        ? this.act.writeMerge.executeWithOptions({ summary: `merge_task ${action.path}` }, [this.ref, action, pending.merge.entries_ref])
        : this.act.writePatch.executeWithOptions({ summary: `apply_patch ${action.path}` }, [this.ref, action, call]);
    // A write that has started is finished and recorded whatever arrives meanwhile: a stop, a
    // cancel request or the deadline takes effect at the next step (a run that began before
    // `prompt_messages` stopped waiting for it, and its record missed a write that then happened).
    const outcome = await (this.state.prompt_messages ? wf.CancellationScope.nonCancellable(write) : write());
    const ids = { call_id: call.call_id, action_id: action.action_id };
    const paths = action.paths ?? [action.path];
    switch (outcome.kind) {
      case 'approval_stale':
        return errorResult(call.call_id, 'approval_stale', {
          action_id: action.action_id,
          path: action.path,
          ...(action.paths ? { paths } : {}),
        });
      case 'recovery_uncertain':
        throw new RunStop(
          'failed',
          'recovery_uncertain',
          `${'path' in outcome ? outcome.path : action.path} matches neither the digest before nor after action ${action.action_id}`,
        );
      default:
        this.view.counters.writes++;
        this.state.recent_calls = [];
        this.state.workspace_digest = outcome.workspace_digest ?? null;
        this.trace.add(
          'action_written',
          {
            path: action.path,
            ...(action.paths ? { paths } : {}),
            before: action.before,
            after: action.after,
            recovered: outcome.recovered,
            ...(outcome.workspace_digest ? { workspace_digest: outcome.workspace_digest } : {}),
          },
          ids,
        );
        if (outcome.receipted) {
          this.view.counters.receipts++;
          this.trace.add('action_receipt', { path: action.path }, ids);
        }
        if (paths.some((p) => endsRedWindow(this.ref.fixture, p, action.paths ? 'merged' : action.before)))
          this.state.wrote_writable = true;
        return okResult(call.call_id, {
          action_id: action.action_id,
          path: action.path,
          ...(action.paths ? { paths, task_id: pending.merge?.task_id } : {}),
          before: action.before,
          after: action.after,
        });
    }
  }

  /** Waits durably for the Signal bound to this action, or asks the named policy. */
  private async awaitApproval(pending: PendingCall): Promise<ApprovalSignal | 'interrupted'> {
    const { call, action, policy } = pending;
    const { action_id, args_digest, workspace_digest } = action;
    const approver = this.input.approver;
    const parsed = parseApprover(approver);
    if (parsed.kind === 'policy') {
      const decision = APPROVAL_POLICIES[parsed.name](policy);
      const signal: ApprovalSignal = { action_id, decision, args_digest, workspace_digest, principal: approver };
      this.trace.add(
        'approval_recorded',
        { decision, principal: approver, args_digest, workspace_digest },
        { call_id: call.call_id, action_id },
      );
      return signal;
    }
    const rules = policy.matched.filter((r) => r.decision === 'ask').map(({ id, why }) => ({ id, why }));
    this.view.pending_approval = { ...action, call_id: call.call_id, rules };
    this.run.setStatus('awaiting_approval');
    // No worker resources are held while waiting: this is a durable condition on workflow state.
    // A wait can be long and signals (ignored approvals, steering) grow its history: when Temporal
    // suggests continue-as-new, the next segment waits instead, with the pending action carried.
    const answered = () => this.state.approval !== null || this.state.interrupted !== null;
    this.state.approval_deadline_at ??= this.run.now() + (this.budgets.approval_timeout_s ?? DEFAULT_APPROVAL_TIMEOUT_S) * 1000;
    this.state.waiting_since = this.run.now();
    const inTime = await wf.condition(
      () => answered() || this.run.mayContinueAsNew(),
      Math.max(1, this.state.approval_deadline_at - this.run.now()),
    );
    // Since the write was first asked for, across continue-as-new (the timeout runs from then too).
    const timeoutS = this.budgets.approval_timeout_s ?? DEFAULT_APPROVAL_TIMEOUT_S;
    const waitedS = () => (this.run.now() - (this.state.approval_deadline_at! - timeoutS * 1000)) / 1000;
    this.run.resumeDeadline();
    if (!inTime) {
      this.metrics.approvalWait(waitedS(), 'timeout');
      throw new RunStop('budget_exhausted', 'approval_timeout', `no approval for ${action.path} within ${timeoutS} s`);
    }
    if (!answered()) await this.run.continueAsNew(pending);
    this.metrics.approvalWait(waitedS(), this.state.approval?.decision ?? 'interrupted');
    this.state.approval_deadline_at = null;
    const approval = this.state.approval;
    this.view.pending_approval = null;
    this.state.approval = null;
    this.run.setStatus('running');
    return approval ?? 'interrupted';
  }

  onApproval(payload: unknown): void {
    const parsed = approvalSignalSchema.safeParse(payload);
    const pending = this.view.pending_approval;
    const ignore = (why: string, actionId?: string) =>
      this.trace.add('approval_ignored', { reason: why }, actionId ? { action_id: actionId } : {});
    if (!parsed.success) return void ignore(`invalid approval payload: ${formatIssues(parsed.error)}`);
    const signal = parsed.data;
    if (this.run.repeated(signal.message_id)) return;
    if (pending === null || this.state.approval !== null) return void ignore('no approval is pending', signal.action_id);
    if (signal.action_id !== pending.action_id) return void ignore('action_id does not match the pending action', signal.action_id);
    if (signal.args_digest !== pending.args_digest || signal.workspace_digest !== pending.workspace_digest) {
      return void ignore('digests do not match the pending action', signal.action_id);
    }
    this.state.approval = signal;
    this.trace.add(
      'approval_recorded',
      {
        decision: signal.decision,
        principal: signal.principal ?? null,
        reason: signal.reason ?? null,
        args_digest: signal.args_digest,
        workspace_digest: signal.workspace_digest,
      },
      { call_id: pending.call_id, action_id: signal.action_id },
    );
  }

  /**
   * Before the run's first write is asked for (a prepared patch or task's merge), once: the candidate
   * tests on the untouched base (a copy of it; the host keeps their outcomes per tree and command,
   * so a batch's epochs pay once). The verifier judges the end against them; if they cannot be
   * had now, it tries again itself.
   */
  async beforeFirstWrite(): Promise<void> {
    // A change of this build's segment start (workflows/changes.ts): a segment of an older build never takes it.
    if (this.state.base_tests_taken || !this.changes.current) return;
    this.state.base_tests_taken = true;
    const timeout = this.ref.fixture.tests.timeout_s * 1000 + BASELINE_MARGIN_MS;
    try {
      const base = await this.act.baselineTests.executeWithOptions(testStepOptions(timeout, 'candidate tests at the base'), [
        this.ref,
        timeout,
      ]);
      this.view.base_tests = base;
      this.trace.add('baseline_tests', base);
    } catch (err) {
      if (isCancellation(err) || !(err instanceof wf.ActivityFailure) || this.run.noteHostLost(err)) throw err;
      this.trace.add('baseline_tests', { status: 'error', detail: err.cause?.message ?? err.message });
    }
  }
}
