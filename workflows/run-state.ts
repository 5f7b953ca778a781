/**
 * The state of one run, as one value: the workflow reads and updates it, continue-as-new carries
 * it whole to the next segment. Pure types and the initial value; workflow-safe.
 */
import type { ApprovalSignal, PendingAction, Subruns } from '../core/contracts';
import type { Allotment } from '../core/budgets';
import type { PolicyEvaluation } from '../core/policy';
import type { RunView } from '../core/run-view';
import type { CarriedTrace } from '../core/trace';
import type { CallView, DecisionView, PendingEntry } from '../core/transcript';
import type { RunRef, SourceRef } from '../core/activities';

/** A write waiting for its approval when the run continued as new. */
export interface PendingCall {
  decision_ref: string;
  reply: string | null;
  call: CallView;
  action: PendingAction;
  policy: PolicyEvaluation;
  /** A merge_task's write: the task, and its entries in the host store. */
  merge?: { task_id: string; entries_ref: string };
}

/**
 * Everything a run knows, as one value: the workflow's methods read and update it, and
 * continue-as-new carries it whole to the next segment (state, never contents), so no field can
 * be forgotten in a copy.
 */
export interface RunState {
  /** What the `state` Query answers. */
  view: RunView;
  ref: RunRef | null;
  source: SourceRef | null;
  /** When the agent's working time ends; moved on by the time a person took to answer an approval. */
  deadline_at: number;
  /** Set while the run waits for a person: the deadline is paused. */
  waiting_since: number | null;
  /** When the pending approval times out (`approval_timeout_s` after it was first asked). */
  approval_deadline_at: number | null;
  /** Decisions taken so far: the replay's cursor. */
  cursor: number;
  /** The transcript's stored head and the entries not stored yet. */
  transcript: { head: string | null; append: PendingEntry[] };
  /** An approval received for the pending action, not acted on yet. */
  approval: ApprovalSignal | null;
  interrupted: string | null;
  steering: string[];
  wrote_writable: boolean;
  /** The proposed call that has no result yet: it gets a synthesized one if the run ends first. */
  in_flight: { call_id: string; decision_ref: string; reply: string | null } | null;
  /** A write waiting for its approval when the run continued as new. */
  pending_write: PendingCall | null;
  /** The decisions of the current reply not taken yet, and the interrupt of its turn. */
  reply_rest: DecisionView[];
  turn_interrupted: string | null;
  /** The latest plan the model stated (live context). */
  plan: string | null;
  /** A note for the next live request (e.g. the previous reply was cut off). */
  notice: string | null;
  /** Malformed calls in a row from a live model. */
  format_errors: number;
  /** The task queue of the host that holds the run's workspace (null: the shared queue). */
  host_queue: string | null;
  /** The trace's numbering and unstored events (filled when the run continues as new). */
  trace: CarriedTrace;
  /** Ids of the client messages taken, newest last (at most `SEEN_MESSAGES`): a repeat is ignored. */
  seen_messages: string[];
  /** Sub-runs of this run (its input's, else its fixture's; a task's run only as its parent allows), or null. */
  subruns: Subruns | null;
  /** An orchestrating replay's task replays by title (digests in the host store). */
  child_replays: Record<string, string>;
  /** What the workflow keeps of each task beside its roster entry, to reopen it. */
  task_refs: Record<string, TaskRef>;
  /** Messages about tasks (one ended, say) for the next decision; kept in every context. */
  task_messages: string[];
  /** A parent asked this task's run to stop (the reason), or null. */
  stop: string | null;
  /** Identities of the calls made since the last write (a repeat among them is a repeated call). */
  recent_calls: string[];
  /**
   * The workspace's digest as the run last made it (prepared, after setup, after each write):
   * recorded with each turn's start, which a fork restores. Unset in runs that began before it was kept.
   */
  workspace_digest?: string | null;
  /**
   * Tasks draw on this orchestrating run's budgets (a run started before that was decided has it
   * unset: its tasks each got the run's budgets, as then).
   */
  tree_budgets?: boolean;
  /**
   * A stop, a cancel request and an interrupt take effect at any moment: from loading on, cutting
   * off the running call or verification (the `messages-at-any-moment` patch). Unset in a run
   * that began before: it replays as it ran (docs/how-a-run-goes.md).
   */
  prompt_messages?: boolean;
  /** The base's test outcomes were asked for, before the first write (unset in runs that began before they were). */
  base_tests_taken?: boolean;
}

/** A task's dispatch and what its last run left, to reopen it with its context. */
export interface TaskRef {
  dispatch_ref: string;
  paths: string[] | null;
  replay_digest: string | null;
  /** The last run's transcript head, replay cursor and trace numbering. */
  transcript_head: string | null;
  cursor: number;
  next_seq: number;
  /** Counts the task's news: each time it ends or starts to wait for a person (task_status wait). */
  news: number;
  /** The news the run has seen in a task_status answer. */
  seen: number;
  /** What the task's running execution holds of this run's budgets (tree budgets); null once it ended. */
  allotment?: Allotment | null;
}

export function initialState(runId: string): RunState {
  return {
    view: {
      run_id: runId,
      fixture: null,
      task: null,
      replay: null,
      replay_digest: null,
      segment: 1,
      backend: 'local',
      approver: 'interactive',
      status: 'running',
      reason: null,
      detail: null,
      budgets: null,
      counters: {
        turns: 0,
        tool_calls: 0,
        writes: 0,
        receipts: 0,
        model_retries: 0,
        repeated_calls: 0,
        empty_replies: 0,
        unreceipted_changes: 0,
      },
      tool_errors: {},
      red_observed: false,
      pending_approval: null,
      verification: null,
      isolation: null,
      diff_paths: [],
      wrap_up: null,
      deadline_reached: false,
      usage: null,
      prompt: null,
      prompt_cache: null,
      builds: [],
      final_summary: null,
      subruns: null,
      parent: null,
      setup: null,
      trace_id: null,
      trust_repository: null,
      tasks_spent: null,
      cost_limit: null,
    },
    ref: null,
    source: null,
    deadline_at: 0,
    waiting_since: null,
    approval_deadline_at: null,
    cursor: 0,
    transcript: { head: null, append: [] },
    approval: null,
    interrupted: null,
    steering: [],
    wrote_writable: false,
    in_flight: null,
    pending_write: null,
    reply_rest: [],
    turn_interrupted: null,
    plan: null,
    notice: null,
    format_errors: 0,
    host_queue: null,
    trace: { next_seq: 1, unstored: [] },
    seen_messages: [],
    subruns: null,
    child_replays: {},
    task_refs: {},
    task_messages: [],
    stop: null,
    recent_calls: [],
  };
}
