/**
 * What the `state` query returns and how a run's record (SPEC section 7) is derived from it.
 */
import {
  sumUsage,
  type BaseTests,
  type Budgets,
  type CostLimit,
  type EgressSummary,
  type ForkedFrom,
  IsolationEvidence,
  PendingAction,
  type RecordVerdict,
  RunRecord,
  type RunStatus,
  type SubrunCounts,
  type TreeSpend,
  type Usage,
  type VerifierFindings,
} from './contracts';
import type { ErrorCode } from './errors';
import type { PromptRef } from './prompt';
import type { RunReason } from './reasons';

export interface PendingActionView extends PendingAction {
  call_id: string;
  /** The tool-policy rules that put this action at "ask" (why a person is asked). */
  rules: { id: string; why: string }[];
}

/** One task of an orchestrating run, as its roster shows it. */
export interface TaskView {
  task_id: string;
  title: string;
  /** The dispatch's action id (the task id derives from it). */
  action_id: string;
  status: RunStatus | 'starting';
  reason: RunReason | null;
  /** The write the task waits to have approved: its open question to a person. */
  pending_path: string | null;
  /** The task's final summary, when it ended (shortened). */
  summary: string | null;
  diff_paths: string[];
  /** The task's run id (its workspace), once it started. */
  run_id: string | null;
  /** True once its change was merged into this run's workspace. */
  merged: boolean;
  /** 1, plus one for each time a message reopened it. */
  executions: number;
  /** Messages sent to its last execution that it ended before reading (absent when none). */
  unread?: number;
}

/** A run's setup phase (SPEC section 11), once it started. */
export interface SetupView {
  /** `ran`: the commands ran and their container became the run's image; `cached`: an earlier run's image was used. */
  status: 'running' | 'ran' | 'cached' | 'failed';
  /** Digest of the setup's inputs: the cache image's tag. */
  key: string | null;
  /** The image the run's tests and acceptance run in after setup (content id). */
  image_id: string | null;
  /** Commands that ran (0 for a cached setup). */
  commands: number;
  egress: EgressSummary;
  /** The isolation evidence of the setup phase (null for a cached setup: nothing ran). */
  isolation: IsolationEvidence | null;
}

export interface RunView {
  /** The first execution's run id: names the workspace, the ledger rows and the stored trace. */
  run_id: string;
  fixture: string | null;
  /** The fixture's task, as the run was given it. */
  task: string | null;
  replay: string | null;
  /** Digest of the replay's content as read when the run started; the run uses only that. */
  replay_digest: string | null;
  /** 1, plus one for each continue-as-new. */
  segment: number;
  backend: 'local' | 'docker';
  approver: string;
  status: RunStatus;
  reason: RunReason | null;
  detail: string | null;
  budgets: Budgets | null;
  counters: {
    turns: number;
    tool_calls: number;
    writes: number;
    receipts: number;
    model_retries: number;
    /** Calls identical (tool and arguments) to one made earlier with no write in between: they could only get the same answer. */
    repeated_calls: number;
    /** Replies that carried neither a tool call nor any text (a plan or final that says nothing). */
    empty_replies: number;
    /** Test and acceptance processes whose changes to the workspace were undone (absent in runs from before it was kept). */
    unreceipted_changes?: number;
  };
  tool_errors: Partial<Record<ErrorCode, number>>;
  red_observed: boolean;
  pending_approval: PendingActionView | null;
  verification: VerifierFindings | null;
  /** The candidate tests at the untouched base, taken before the first write (absent before it; in older runs). */
  base_tests?: BaseTests | null;
  /** The docker backend's isolation evidence, for runs on it. */
  isolation: IsolationEvidence | null;
  diff_paths: string[];
  /** Summary from the wrap-up turn after the turn limit, when there was one. */
  wrap_up: string | null;
  /** True when the deadline passed, even if the run ended for another reason (cancellation). */
  deadline_reached: boolean;
  /** Model usage of a live source; null for a replay. */
  usage: Usage | null;
  /** The prompt version a live source uses, with the digest of its content; null for a replay. */
  prompt: PromptRef | null;
  /**
   * The provider's prompt cache over a live run: calls that read part of their input from it
   * (`usage.cached_tokens` counts those tokens) and input tokens written to it. Null for a replay.
   */
  prompt_cache: { hits: number; write_tokens: number } | null;
  /**
   * The builds of the workers that ran the run (package version and source digest, host/build.ts),
   * in the order they first took part: the one that loaded it, then any other that took a turn.
   */
  builds: string[];
  /** The model's `final` text that verification judged (shortened), when there was one. */
  final_summary: string | null;
  /** An orchestrating run's tasks and counts; null when sub-runs are off. */
  subruns: { counts: SubrunCounts; tasks: TaskView[] } | null;
  /** The task this run works on for its parent; null for a run of its own. */
  parent: { workflow_id: string; task_id: string; title: string } | null;
  /** The setup phase; null for a run without one. */
  setup: SetupView | null;
  /**
   * The OpenTelemetry trace of the run (32 hex digits) when its worker exports traces, else null.
   * A task's run is in its parent's trace; each run of a batch has its own.
   */
  trace_id: string | null;
  /** A repository run: the user trusted its content (`--trust-repository`); null for a fixture (and runs from before it was kept). */
  trust_repository?: boolean | null;
  /** An orchestrating run: what its tasks' runs spent, summed as each ended (their own tasks included); null otherwise. */
  tasks_spent?: TreeSpend | null;
  /** Set when the run stopped for `max_cost_usd`. */
  cost_limit?: CostLimit | null;
  /** A fork: the run it started from and the turn after which it did (absent for any other run). */
  forked_from?: ForkedFrom | null;
  /**
   * Messages that arrived and that no decision read because the run ended first (steering, and an
   * interrupt with nothing left to stop); null when there were none (absent in older runs).
   */
  unread?: { messages: string[]; interrupt: string | null } | null;
}

/** What a run and its tasks spent: the run's own figures plus its tasks' (an orchestrating run). */
export function treeSpend(view: RunView): TreeSpend {
  const spent = view.tasks_spent ?? { runs: 0, turns: 0, tool_calls: 0, usage: null };
  return {
    runs: 1 + spent.runs,
    turns: view.counters.turns + spent.turns,
    tool_calls: view.counters.tool_calls + spent.tool_calls,
    usage: sumUsage(view.usage, spent.usage),
  };
}

/** The verdict as the record carries it: counts and the names each finding gives. */
export function recordVerdict(v: VerifierFindings): RecordVerdict {
  const verdict = v.verdict!;
  return {
    decided_by: verdict.decided_by,
    base: verdict.base ? verdict.base.outcomes : null,
    end: v.candidate_tests.outcomes ?? null,
    fixed_tests: verdict.fixed_tests,
    tests_lost: verdict.tests_lost,
    tests_regressed: verdict.tests_regressed,
    new_tests_failed: verdict.new_tests_failed,
    flaky: verdict.flaky,
    fail_to_pass: verdict.fail_to_pass,
    pass_to_pass: verdict.pass_to_pass,
    verification_tampered: v.verification_tampered ?? [],
    test_config_changed: v.test_config_changed ?? [],
  };
}

export function buildRecord(view: RunView): RunRecord {
  const v = view.verification;
  return {
    fixture: view.fixture ?? '',
    replay: view.replay,
    status: view.status,
    reason: view.reason,
    writes: view.counters.writes,
    receipts: view.counters.receipts,
    red_observed: view.red_observed,
    diff_paths: v ? v.diff_paths : view.diff_paths,
    candidate_tests: v
      ? { discovered: v.candidate_tests.discovered, passed: v.candidate_tests.passed, failed: v.candidate_tests.failed }
      : null,
    acceptance: v?.acceptance ? { total: v.acceptance.total, passed: v.acceptance.passed, failed: v.acceptance.failed } : null,
    tool_errors: Object.fromEntries(Object.entries(view.tool_errors).sort(([a], [b]) => (a < b ? -1 : 1))),
    turns: view.counters.turns,
    tool_calls: view.counters.tool_calls,
    // Absent from the counters of a run that began before they were kept.
    repeated_calls: view.counters.repeated_calls ?? 0,
    empty_replies: view.counters.empty_replies ?? 0,
    unreceipted_changes: view.counters.unreceipted_changes ?? 0,
    ...(v?.verdict ? { verdict: recordVerdict(v) } : {}),
    ...(view.usage !== null ? { usage: view.usage } : {}),
    // Absent from the state of a run that started before prompts were versioned.
    ...(view.prompt ? { prompt: view.prompt } : {}),
    ...(view.subruns !== null
      ? {
          subruns: view.subruns.counts,
          tasks: view.subruns.tasks.map((t) => ({
            task_id: t.task_id,
            title: t.title,
            status: t.status === 'starting' ? 'running' : t.status,
            reason: t.reason,
          })),
        }
      : {}),
    ...(view.setup ? { egress: { allowed: view.setup.egress.allowed, denied: view.setup.egress.denied } } : {}),
    ...(typeof view.trust_repository === 'boolean' ? { trust_repository: view.trust_repository } : {}),
    ...(view.subruns !== null && view.tasks_spent ? { tree: treeSpend(view) } : {}),
    ...(view.reason === 'max_cost_usd' && view.cost_limit ? { cost_limit: view.cost_limit } : {}),
    ...(view.forked_from ? { forked_from: view.forked_from } : {}),
    trace_id: view.trace_id ?? null,
  };
}

/**
 * The workflow's result: the record and the final state, readable without a worker. The trace
 * is in the host store under `trace.run_id` (`npm run agent -- trace`).
 */
export interface RunOutcome {
  record: RunRecord;
  state: RunView;
  trace: { run_id: string; events: number };
  /** Head of the run's transcript in the host store: every decision with its one result. */
  transcript: string | null;
  /** Decisions taken from a replay (a reopened task goes on from here). */
  cursor: number;
}
