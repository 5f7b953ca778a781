/**
 * Sub-runs (SPEC section 12): an orchestrating run's tasks are child agentRun workflows, addressed
 * by id. This file carries out the five orchestration tools for the run that owns it; the roster
 * lives in the run's state (view.subruns), the child handles only in memory.
 *
 * Hazards:
 * - A task's id derives from the parent's workflow id and the dispatch's action id, so the same
 *   proposal made again names the task that exists; Temporal refuses a second start of that id.
 * - A child's outcome arrives as its result while this run goes on; it becomes a message for the
 *   next decision. The parent does not continue as new while a task runs (its result would be
 *   lost with the run that started it), and its close policy cancels the tasks still running.
 * - A merge is one write over several paths, through the usual write path (policy, approval bound
 *   to the action and digests, ledger, receipt).
 * - Tasks draw on this run's budgets (`tree_budgets`): a dispatch (or a reopening) reserves the
 *   task's allotment, counted as spent until the task's outcome comes back with what it really
 *   spent. A task that ends without an outcome is charged its whole allotment: what it spent is
 *   unknown, and the tree must not spend more than its budgets.
 */
import * as wf from '@temporalio/workflow';
import { taskAllotment, type Allotment, type BudgetUse } from '../core/budgets';
import {
  errorResult,
  okResult,
  sumUsage,
  type Budgets,
  type ChildInput,
  type ParsedRunInput,
  type RunInput,
  type ToolResult,
  type TreeSpend,
} from '../core/contracts';
import { evaluatePolicy, type PolicyDecision, type PolicyEvaluation } from '../core/policy';
import type { RunOutcome, TaskView } from '../core/run-view';
import { taskEnded, taskEndedMessage, taskId } from '../core/tasks';
import type { Trace } from '../core/trace';
import { isOrchestrationTool, type OrchestrationToolName } from '../core/tools';
import type { CallView } from '../core/transcript';
import { AGENT_RUN, steerSignal, stopSignal, taskUpdateSignal } from './messages';
import type { PendingCall, RunState } from './run-state';
import type { Activities, RunRef } from '../core/activities';
import type { RunReason } from '../core/reasons';

/** What the orchestration needs of the run that owns it. */
export interface TaskOwner {
  readonly state: RunState;
  readonly trace: Trace;
  readonly input: ParsedRunInput;
  readonly ref: RunRef;
  readonly act: wf.ActivityInterfaceFor<Activities>;
  approveAndWrite(pending: PendingCall): Promise<ToolResult>;
  /** What comes before the run's first write is asked for (the base's test outcomes), once. */
  beforeFirstWrite(): Promise<void>;
  /** What counts against the run's budgets, its tasks' spending and holdings included. */
  used(): BudgetUse;
  /** Applies the effect of a task's news (a Signal) where a Signal's would take effect. */
  receive(effect: () => void): void;
  /** Applies the effect of a task's outcome (a child's result) once the workflow task's promises have settled. */
  arrive(effect: () => void): void;
}

const STRICTNESS: Record<PolicyDecision, number> = { allow: 0, ask: 1, deny: 2 };

export class Orchestration {
  constructor(private readonly owner: TaskOwner) {
    wf.setHandler(taskUpdateSignal, (u) =>
      owner.receive(() => {
        const task = this.find(u?.task_id);
        // The outcome is the child's result: an update never overrides an end.
        if (task === null || taskEnded(task)) return;
        if (u.status === 'awaiting_approval' && task.status !== 'awaiting_approval') this.state.task_refs[task.task_id].news++;
        task.status = u.status as TaskView['status'];
        task.pending_path = u.pending_path ?? null;
        task.run_id ??= u.run_id;
      }),
    );
  }

  private get state(): RunState {
    return this.owner.state;
  }

  private get tasks(): TaskView[] {
    return this.state.view.subruns?.tasks ?? [];
  }

  /** True while a task of this run has not ended. */
  active(): boolean {
    return this.tasks.some((t) => !taskEnded(t));
  }

  /** What the running tasks hold of this run's budgets. */
  held(): { turns: number; tool_calls: number; cost_usd: number } {
    const held = { turns: 0, tool_calls: 0, cost_usd: 0 };
    for (const ref of Object.values(this.state.task_refs)) {
      if (!ref.allotment) continue;
      held.turns += ref.allotment.max_turns;
      held.tool_calls += ref.allotment.max_tool_calls;
      held.cost_usd += ref.allotment.max_cost_usd ?? 0;
    }
    return held;
  }

  /** Stops every task still running and waits, at most `timeoutMs`, for their outcomes. */
  async stopAll(reason: string, timeoutMs: number): Promise<void> {
    for (const task of this.tasks.filter((t) => !taskEnded(t)))
      await wf
        .getExternalWorkflowHandle(task.task_id)
        .signal(stopSignal, { reason, message_id: `${this.state.view.run_id}:end:${task.executions}` })
        .catch(() => undefined); // it ended meanwhile
    await wf.condition(() => !this.active(), timeoutMs);
  }

  /** Until a running task has ended and given back what it held. */
  async nextEnd(): Promise<void> {
    const holding = () => Object.values(this.state.task_refs).filter((r) => r.allotment).length;
    const before = holding();
    if (before > 0) await wf.condition(() => holding() < before);
  }

  /**
   * The allotment a task's next execution gets (null without tree budgets), or why the run's
   * budgets cannot fund one.
   */
  private allot(): { ok: true; allotment: Allotment | null } | { ok: false; detail: string } {
    if (!this.state.tree_budgets) return { ok: true, allotment: null };
    const used = this.owner.used();
    const free = this.state.subruns!.max_active - this.tasks.filter((t) => !taskEnded(t)).length;
    return taskAllotment(
      this.state.view.budgets as Budgets,
      { turns: used.turns, tool_calls: used.tool_calls, cost_usd: used.cost_usd ?? 0 },
      free,
    );
  }

  private find(id: unknown): TaskView | null {
    return typeof id === 'string' ? (this.tasks.find((t) => t.task_id === id) ?? null) : null;
  }

  /** Carries out one orchestration call; every call gets its one result. */
  async call(decisionRef: string, reply: string | null, call: CallView): Promise<ToolResult> {
    if (!isOrchestrationTool(call.name)) throw new Error(`${call.name} is not an orchestration tool`);
    return this.carriers[call.name](call, decisionRef, reply);
  }

  /** One carrier per orchestration tool of the table (core/tools.ts): a tool without one does not compile. */
  private readonly carriers: {
    [N in OrchestrationToolName]: (call: CallView, decisionRef: string, reply: string | null) => Promise<ToolResult>;
  } = {
    dispatch_task: (call) => this.dispatch(call),
    task_status: (call) => this.status(call),
    message_task: (call) => this.message(call),
    stop_task: (call) => this.stop(call),
    merge_task: (call, decisionRef, reply) => this.merge(decisionRef, reply, call),
  };

  /**
   * task_status. With wait: until one of the tasks asked about has news this run has not seen in
   * an answer yet (it ended, or started to wait for a person); at once when there is some.
   */
  private async status(call: CallView): Promise<ToolResult> {
    const args = call.task!.args;
    const one = args.task_id === undefined ? null : this.find(args.task_id);
    if (args.task_id !== undefined && one === null) return this.unknown(call.call_id, args.task_id);
    const asked = one ? [one] : this.tasks;
    const unseen = () => asked.some((t) => this.state.task_refs[t.task_id].news > this.state.task_refs[t.task_id].seen);
    if (args.wait && asked.some((t) => !taskEnded(t) || unseen())) await wf.condition(unseen);
    for (const t of asked) this.state.task_refs[t.task_id].seen = this.state.task_refs[t.task_id].news;
    return okResult(call.call_id, { tasks: asked });
  }

  private unknown(callId: string, given: unknown): ToolResult {
    this.state.view.subruns!.counts.unknown_task++;
    return errorResult(callId, 'unknown_task', {
      task_id: typeof given === 'string' ? given.slice(0, 200) : null,
      known: this.tasks.map((t) => t.task_id),
    });
  }

  private notAccepting(callId: string, task: TaskView, why: string): ToolResult {
    return errorResult(callId, 'task_not_accepting', { task_id: task.task_id, status: task.status, reason: why });
  }

  private async dispatch(call: CallView): Promise<ToolResult> {
    const limits = this.state.subruns!;
    const { action_id, args } = call.task!;
    const id = taskId(wf.workflowInfo().workflowId, action_id);
    const existing = this.find(id);
    if (existing) return okResult(call.call_id, { task_id: id, title: existing.title, status: existing.status, already_dispatched: true });
    const known = this.tasks.map((t) => t.task_id);
    if (this.tasks.length >= limits.max_children)
      return errorResult(call.call_id, 'task_not_accepting', {
        reason: `this run may dispatch at most ${limits.max_children} tasks`,
        known,
      });
    const running = this.tasks.filter((t) => !taskEnded(t)).map((t) => t.task_id);
    if (running.length >= limits.max_active)
      return errorResult(call.call_id, 'task_not_accepting', {
        reason: `at most ${limits.max_active} tasks run at once; merge or wait for one to end`,
        running,
      });
    const allotted = this.allot();
    if (!allotted.ok) return errorResult(call.call_id, 'task_not_accepting', { reason: allotted.detail, known });
    const title = args.title!;
    this.state.task_refs[id] = {
      dispatch_ref: call.ref,
      paths: args.paths ?? null,
      replay_digest: this.state.source?.kind === 'replay' ? (this.state.child_replays[title] ?? null) : null,
      transcript_head: null,
      cursor: 0,
      next_seq: 1,
      news: 0,
      seen: 0,
      allotment: allotted.allotment,
    };
    const task: TaskView = {
      task_id: id,
      title,
      action_id,
      status: 'starting',
      reason: null,
      pending_path: null,
      summary: null,
      diff_paths: [],
      run_id: null,
      merged: false,
      executions: 1,
    };
    this.state.view.subruns!.tasks.push(task);
    this.state.view.subruns!.counts.dispatched++;
    await this.start(task, null);
    return okResult(call.call_id, { task_id: id, title, status: task.status });
  }

  /** Starts (or reopens) the child run of a task, and watches for its outcome. */
  private async start(task: TaskView, reopen: ChildInput['reopen']): Promise<void> {
    const input = this.owner.input;
    const ref = this.state.task_refs[task.task_id];
    const depth = (input.child?.depth ?? 0) + 1;
    // The task's share of the tree (tree budgets), over what its run would otherwise take alone.
    const budgets = ref.allotment ? { ...input.budgets, ...ref.allotment } : input.budgets;
    const child: RunInput = {
      ...(input.fixture !== undefined ? { fixture: input.fixture } : {}),
      ...(input.repo !== undefined ? { repo: input.repo } : {}),
      // After a setup, the task runs in the run's setup image (its workspace already holds the products).
      ...((this.state.view.setup?.image_id ?? input.image) !== undefined ? { image: this.state.view.setup?.image_id ?? input.image } : {}),
      source: input.source,
      backend: input.backend,
      approver: input.approver,
      ...(budgets ? { budgets } : {}),
      ...(input.host_lost_s ? { host_lost_s: input.host_lost_s } : {}),
      // A task may dispatch tasks of its own only while max_depth allows.
      ...(this.state.subruns && depth < this.state.subruns.max_depth ? { subruns: this.state.subruns } : {}),
      // A live task uses its parent's prompt version, whatever version is newest when it starts.
      ...(this.state.view.prompt ? { prompt: this.state.view.prompt.version } : {}),
      child: {
        parent_workflow_id: wf.workflowInfo().workflowId,
        task_id: task.task_id,
        title: task.title,
        dispatch_ref: ref.dispatch_ref,
        paths: ref.paths,
        from_run: this.state.view.run_id,
        host_queue: this.state.host_queue,
        replay_digest: ref.replay_digest,
        depth,
        reopen,
      },
    };
    let handle;
    try {
      handle = await wf.startChild(AGENT_RUN, {
        workflowId: task.task_id,
        args: [child],
        // Closing or cancelling this run cancels its tasks still running.
        parentClosePolicy: 'REQUEST_CANCEL',
        workflowIdReusePolicy: reopen ? 'ALLOW_DUPLICATE' : 'REJECT_DUPLICATE',
      });
    } catch (err) {
      this.ended(task.task_id, {
        status: 'failed',
        reason: 'task_not_started',
        summary: String((err as Error)?.message ?? err).slice(0, 240),
        diff_paths: [],
        spent: { runs: 0, turns: 0, tool_calls: 0, usage: null },
      });
      return;
    }
    if (task.status === 'starting') task.status = 'running';
    void handle.result().then(
      (outcome) => this.owner.arrive(() => this.finished(task.task_id, outcome as RunOutcome)),
      (err: unknown) =>
        this.owner.arrive(() =>
          this.ended(task.task_id, {
            // A run that ended without its record: cancelled before it could make one (a run that
            // began before stops were taken from loading on), or failed.
            status: wf.isCancellation(err) ? 'cancelled' : 'failed',
            reason: wf.isCancellation(err) ? 'cancelled' : 'workflow_failed',
            summary: String((err as Error)?.message ?? err).slice(0, 240),
            diff_paths: [],
            spent: this.whole(task.task_id),
          }),
        ),
    );
  }

  private finished(id: string, outcome: RunOutcome): void {
    const ref = this.state.task_refs[id];
    ref.transcript_head = outcome.transcript;
    ref.cursor = outcome.cursor;
    ref.next_seq = outcome.trace.events + 1;
    const r = outcome.record;
    this.ended(id, {
      status: r.status,
      reason: r.reason,
      summary: outcome.state.final_summary ?? outcome.state.wrap_up,
      diff_paths: r.diff_paths,
      run_id: outcome.state.run_id,
      unread: outcome.state.unread?.messages.length ?? 0,
      spent: r.tree ?? { runs: 1, turns: r.turns, tool_calls: r.tool_calls, usage: r.usage ?? null },
    });
  }

  /** What a task that ended without an outcome is charged: its whole allotment (nothing without tree budgets). */
  private whole(id: string): TreeSpend {
    const a = this.state.task_refs[id].allotment;
    if (!a) return { runs: 1, turns: 0, tool_calls: 0, usage: null };
    const cost = a.max_cost_usd;
    return {
      runs: 1,
      turns: a.max_turns,
      tool_calls: a.max_tool_calls,
      usage: cost === undefined ? null : { model_calls: 0, input_tokens: 0, output_tokens: 0, cached_tokens: 0, cost_usd: cost },
    };
  }

  /** A task ended: its roster entry, a trace event, and a message for the next decision. */
  private ended(
    id: string,
    end: {
      status: TaskView['status'];
      reason: RunReason | null;
      summary: string | null;
      diff_paths: string[];
      run_id?: string;
      /** Messages sent to it that it ended before reading. */
      unread?: number;
      /** What the task's execution spent (with its own tasks): added to the tree, its allotment given back. */
      spent: TreeSpend;
    },
  ): void {
    const task = this.find(id)!;
    const spent = this.state.view.tasks_spent;
    if (spent)
      this.state.view.tasks_spent = {
        runs: spent.runs + end.spent.runs,
        turns: spent.turns + end.spent.turns,
        tool_calls: spent.tool_calls + end.spent.tool_calls,
        usage: sumUsage(spent.usage, end.spent.usage),
      };
    this.state.task_refs[id].allotment = null;
    task.status = end.status;
    task.reason = end.reason;
    task.summary = end.summary;
    task.diff_paths = end.diff_paths;
    task.pending_path = null;
    if (end.run_id) task.run_id = end.run_id;
    if (end.unread) task.unread = end.unread;
    else delete task.unread;
    this.state.task_refs[id].news++;
    this.owner.trace.add('task_ended', {
      task_id: id,
      title: task.title,
      status: task.status,
      reason: task.reason,
      diff_paths: task.diff_paths,
      execution: task.executions,
    });
    this.state.task_messages.push(taskEndedMessage(task));
  }

  private async message(call: CallView): Promise<ToolResult> {
    const { action_id, args } = call.task!;
    const task = this.find(args.task_id);
    if (task === null) return this.unknown(call.call_id, args.task_id);
    if (task.status === 'cancelled') return this.notAccepting(call.call_id, task, 'the task was stopped');
    if (task.merged) return this.notAccepting(call.call_id, task, 'the task was merged; dispatch a new task for more work');
    if (task.status === 'verifying')
      return this.notAccepting(call.call_id, task, 'the task is being verified; message it when it has ended');
    const counts = this.state.view.subruns!.counts;
    if (!taskEnded(task)) {
      // The id makes the message count once however often the signal is delivered.
      await wf
        .getExternalWorkflowHandle(task.task_id)
        .signal(steerSignal, { message: args.text!, message_id: `${this.state.view.run_id}:${action_id}` });
      counts.messages++;
      return okResult(call.call_id, { task_id: task.task_id, delivered: 'to the running task, at its next step' });
    }
    if (task.run_id === null) return this.notAccepting(call.call_id, task, 'the task never started');
    // A reopened task gets a new share of what the tree has left, not its first allotment again.
    const allotted = this.allot();
    if (!allotted.ok) return this.notAccepting(call.call_id, task, allotted.detail);
    counts.messages++;
    counts.messages_to_ended++;
    const ref = this.state.task_refs[task.task_id];
    ref.allotment = allotted.allotment;
    task.executions++;
    task.status = 'starting';
    task.reason = null;
    await this.start(task, {
      run_id: task.run_id,
      transcript_head: ref.transcript_head,
      cursor: ref.cursor,
      next_seq: ref.next_seq,
      message: args.text!,
    });
    return okResult(call.call_id, { task_id: task.task_id, delivered: 'reopened the task with its context', execution: task.executions });
  }

  private async stop(call: CallView): Promise<ToolResult> {
    const { action_id, args } = call.task!;
    const task = this.find(args.task_id);
    if (task === null) return this.unknown(call.call_id, args.task_id);
    if (taskEnded(task)) return this.notAccepting(call.call_id, task, 'the task has ended already');
    await wf
      .getExternalWorkflowHandle(task.task_id)
      .signal(stopSignal, { reason: args.reason!, message_id: `${this.state.view.run_id}:${action_id}` });
    this.state.view.subruns!.counts.stops++;
    // The task's end (and the result of its cut-off call) reaches the next decision.
    await wf.condition(() => taskEnded(task));
    return okResult(call.call_id, { task_id: task.task_id, status: task.status, reason: task.reason });
  }

  private async merge(decisionRef: string, reply: string | null, call: CallView): Promise<ToolResult> {
    const task = this.find(call.task!.args.task_id);
    if (task === null) return this.unknown(call.call_id, call.task!.args.task_id);
    // A merge waits for the task to end: only a verified change is merged.
    await wf.condition(() => taskEnded(task));
    if (task.merged) return okResult(call.call_id, { task_id: task.task_id, already_merged: true });
    if (task.status !== 'completed')
      return this.notAccepting(
        call.call_id,
        task,
        `only a completed task is merged; this one ended ${task.status}${task.reason ? ` (${task.reason})` : ''}`,
      );
    const prepared = await this.owner.act.prepareMerge.executeWithOptions({ summary: `prepare merge_task ${task.title}` }, [
      this.owner.ref,
      { task_id: task.task_id, run_id: task.run_id! },
    ]);
    switch (prepared.kind) {
      case 'conflict':
        return errorResult(call.call_id, 'merge_conflict', {
          task_id: task.task_id,
          paths: prepared.paths,
          reason: 'these files changed in your workspace since the task was dispatched',
        });
      case 'unsupported':
        return errorResult(call.call_id, 'merge_conflict', { task_id: task.task_id, paths: prepared.paths, reason: prepared.reason });
      case 'too_large':
        return errorResult(call.call_id, 'too_large', {
          task_id: task.task_id,
          reason: prepared.reason,
          workspace_bytes: prepared.workspace_bytes,
          limit: prepared.limit,
        });
      case 'empty':
        task.merged = true;
        return okResult(call.call_id, { task_id: task.task_id, paths: [] });
    }
    const { action } = prepared;
    const policy = mergePolicy(action.paths!, this.owner.ref);
    if (policy.decision === 'deny') {
      const denied = action.paths!.filter((p) => evaluatePolicy({ name: 'apply_patch' }, p, this.owner.ref.fixture).decision === 'deny');
      return errorResult(call.call_id, 'write_denied', {
        task_id: task.task_id,
        paths: denied,
        rules: policy.matched.filter((r) => r.decision === 'deny'),
      });
    }
    await this.owner.beforeFirstWrite();
    this.owner.trace.add(
      'approval_requested',
      {
        path: action.path,
        paths: action.paths,
        before: action.before,
        after: action.after,
        args_digest: action.args_digest,
        workspace_digest: action.workspace_digest,
        diff_bytes: action.diff.length,
        task_id: task.task_id,
      },
      { call_id: call.call_id, action_id: action.action_id },
    );
    const result = await this.owner.approveAndWrite({
      decision_ref: decisionRef,
      reply,
      call,
      action,
      policy,
      merge: { task_id: task.task_id, entries_ref: prepared.entries_ref },
    });
    if (result.ok) {
      task.merged = true;
      this.state.view.subruns!.counts.merges++;
    }
    return result;
  }
}

/** The policy of a merge: every path as apply_patch would meet it; the strictest decision wins. */
function mergePolicy(paths: string[], ref: RunRef): PolicyEvaluation {
  const evaluations = paths.map((p) => evaluatePolicy({ name: 'apply_patch' }, p, ref.fixture));
  const decision = evaluations.reduce<PolicyDecision>(
    (worst, e) => (STRICTNESS[e.decision] > STRICTNESS[worst] ? e.decision : worst),
    'allow',
  );
  const matched = [...new Map(evaluations.flatMap((e) => e.matched).map((m) => [m.id, m])).values()];
  return { decision, matched };
}
