/**
 * What workflows call: the activities of a run as one interface, and every value that crosses
 * between a workflow and its activities (the run's reference, decisions, outcomes of writes,
 * merges and the setup phase). Types only: the workflow bundle gets none of the activities' code,
 * and the activities (activities/index.ts) are checked against this interface.
 */
import type { RunFacts } from './context';
import type {
  BaseTests,
  Budgets,
  IsolationEvidence,
  ParsedRunInput,
  PendingAction,
  RunSpec,
  TestsSpec,
  ToolResult,
  Usage,
  VerifierFindings,
} from './contracts';
import type { CappedBudget } from './budgets';
import type { PromptRef } from './prompt';
import type { RepoSettings } from './repo-settings';
import type { TraceEvent } from './trace';
import type { CallView, DecisionView, PendingEntry, ResultView } from './transcript';

/** The decision source as the workflow passes it to `decide`: a replay by digest, or a provider. */
export type SourceRef =
  | { kind: 'replay'; digest: string }
  /** An endpoint of the worker's providers file, by name: its URL and key variable are looked up there at each call. */
  | {
      kind: 'provider';
      endpoint: string;
      provider: 'openai' | 'anthropic';
      model: string;
      /** The prompt version loadRun read, stored in the host store under its digest (absent in runs started before prompts were versioned). */
      prompt?: PromptRef;
    };

export interface DecideInput {
  run_id: string;
  source: SourceRef;
  /** Decisions already taken (the replay's cursor). */
  cursor: number;
  turn: number;
  /** Retries of this turn so far: part of a live request's identity. */
  retry: number;
  /** False for the wrap-up turn after the turn limit: the source may only summarise. */
  tools_enabled: boolean;
  /** The run may call the orchestration tools (sub-runs enabled). */
  orchestrating?: boolean;
  /**
   * An orchestrating run's task ids by title: a replay cannot know a run's ids in advance, so a
   * replayed call's `task_id` of `$task:<title>` means the task of that title.
   */
  tasks?: Record<string, string>;
  /** The transcript so far: its stored head and the entries not stored yet. */
  transcript: { head: string | null; append: PendingEntry[] };
  /** The authoritative facts a live context is rebuilt from (null for a replay). */
  facts: RunFacts | null;
  /**
   * A live run with `max_cost_usd`: US dollars it may still spend (its budget less what it spent
   * and what its tasks spent or hold). A request that could cost more is not sent.
   */
  cost_room_usd?: number;
  /**
   * A replay's decision that is a valid read-only call (read_file, search, show_diff) is run with
   * it, in the same activity and store commit, and its result comes back as the decision's `ran`:
   * a read-only step is then one activity, not two. The run still decides whether the result is
   * taken (budgets, an interrupt); one it does not take changed nothing, the call being read-only.
   */
  read_ahead?: { ref: RunRef; timeout_ms: number };
}

/** How a live reply was had (absent for a replay and when no reply came). */
interface LiveReply {
  /** True when the context had to be compacted after the provider said it was too long. */
  compacted?: boolean;
  /** The response came from the host store: a retried activity, not a new provider request. */
  from_store?: boolean;
  /**
   * The provider's prompt cache on this call: `hit` when part of the input was read from it
   * (`usage.cached_tokens` > 0), and the input tokens written to it (Anthropic; 0 for OpenAI).
   */
  cache?: { hit: boolean; write_tokens: number };
}

/** What `decide` answers, with the build of the worker that answered (absent from histories recorded before it). */
export type DecideResult = (
  | ({ kind: 'decisions'; decisions: DecisionView[]; cursor: number; head: string | null; usage: Usage | null } & LiveReply)
  | { kind: 'exhausted'; head: string | null; usage: null }
  | ({
      kind: 'model_error';
      transient: boolean;
      retry_after_ms: number | null;
      detail: string;
      /** The reply was cut off by the output limit (none of its calls ran). */
      cut_off: boolean;
      /** The replay's model_error decision, to be kept in the transcript; null for a live failure. */
      ref: string | null;
      cursor: number;
      head: string | null;
      usage: Usage | null;
    } & LiveReply)
  | ({ kind: 'refused'; detail: string; head: string | null; usage: Usage | null } & LiveReply)
  /** The next request could cost more than `cost_room_usd`: it was not sent. */
  | { kind: 'over_budget'; estimate_usd: number; room_usd: number; head: string | null; usage: null }
) & { build?: string };

/** One request the proxy saw (SPEC section 11's `{host, port, method?, bytes}`, the status it answered, and why it refused). */
export interface EgressEvent {
  allowed: boolean;
  host: string;
  port: number | null;
  method: string | null;
  /** Bytes through the proxy for this request: the reply to the sandbox plus the request from it. */
  bytes: number;
  /** The HTTP status the proxy answered the sandbox with (403 for a refusal; 200 for a refused CONNECT it opened to hand the 403 inside TLS). */
  status: number | null;
  /** A refusal's reason (DENY_REASONS' words); absent for an allowed request. */
  reason?: string;
}

export interface EgressReport {
  allowed: number;
  denied: number;
  /** The first EGRESS_PAGE requests, in order. */
  events: EgressEvent[];
  /** Requests after those, kept in the control folder: `egressPage` gives them, a page at a time. */
  rest: number;
  /** Requests beyond MAX_EGRESS_EVENTS: counted above, not listed. */
  omitted: number;
}

export interface CommandRecord {
  /** The command as given, each argument shortened for history. */
  argv: string[];
  exit_code: number | null;
  timed_out: boolean;
  /** The end of its output (stdout, then stderr), for a command that failed. */
  output_tail?: string;
}

export interface SetupCommon {
  /** Digest of the setup's inputs (the cache image's tag). */
  key: string;
  commands: CommandRecord[];
  egress: EgressReport;
  /** The setup phase's isolation evidence (null for a cached setup, and when it failed before the probe). */
  isolation: IsolationEvidence | null;
}

export type SetupResult =
  /** `workspace_digest`: the workspace with the setup's products (absent from results recorded before it was returned). */
  | (SetupCommon & { ok: true; cached: boolean; image_id: string; added: number; workspace_digest?: string })
  | (SetupCommon & { ok: false; reason: 'setup_failed' | 'isolation_unverified'; detail: string });

export type PrepareOutcome =
  /** `whole_diff`: the uncut diff when `action.diff` was cut (for the host store, never for history). */
  | { kind: 'prepared'; action: PendingAction; whole_diff: string | null }
  | { kind: 'already_written'; action_id: string; before: string; after: string }
  | { kind: 'rejected'; result: ToolResult };

export type WriteOutcome =
  | { kind: 'written'; recovered: false }
  | { kind: 'receipt_recovered'; recovered: true }
  | { kind: 'already_recorded'; recovered: boolean }
  | { kind: 'approval_stale'; workspace_digest: string }
  | { kind: 'recovery_uncertain'; current: string };

/** One path of a merge: the parent's digest before, the task's after, and the task file's mode. */
export interface MergeEntry {
  path: string;
  before: string;
  after: string;
  executable: boolean;
}

export type MergePrepared =
  /** `whole_diff`: the uncut diff when `action.diff` was cut (for the host store, never for history). */
  | { kind: 'prepared'; action: PendingAction; entries: MergeEntry[]; whole_diff: string | null }
  | { kind: 'conflict'; paths: string[] }
  | { kind: 'unsupported'; paths: string[]; reason: string }
  /** The merge would take the parent's workspace over its limit (`limits.workspaceBytes`). */
  | { kind: 'too_large'; reason: string; workspace_bytes: number; limit: number }
  | { kind: 'empty' };

export type MergeOutcome =
  | { kind: 'written'; recovered: boolean }
  | { kind: 'already_recorded'; recovered: boolean }
  | { kind: 'approval_stale'; workspace_digest: string }
  | { kind: 'recovery_uncertain'; path: string; current: string };

export interface PreparedWorkspace {
  workspace_digest: string;
  files: number;
}

/**
 * A fork, as loadRun found it on this host: the plan of its workspace (the forked run's baseline
 * and receipted writes, in the host store under `plan`) and where its transcript and replay stand
 * after the forked turn.
 */
export interface LoadedFork {
  plan: string;
  transcript: string | null;
  cursor: number;
  /** The workspace digest the forked run recorded after that turn: the restored workspace must have it. */
  workspace_digest: string;
  /** Receipted writes restored on the baseline. */
  writes: number;
  /** The latest plan the forked run's model stated by then (shortened), for a live context. */
  stated_plan: string | null;
}

/** Where a repository run's workspace comes from, as its RunRef carries it. */
export interface RepositoryRef {
  /** As the run's input gave it: absolute, or relative to the worker's working directory. */
  path: string;
  base_commit: string;
  /** A folder of the base tree left out of the workspace: the settings' acceptance files. */
  acceptance_tree_dir: string | null;
  /** A host folder of acceptance files (a batch task's). */
  acceptance_host_dir: string | null;
  /**
   * Where it is read: `host` (the machine's git) only for a repository the user trusts on the
   * local backend; absent (a run loaded before this field) or `sandbox`: in a reading container.
   */
  read?: 'host' | 'sandbox';
}

/** What a repository run recorded about its base, for the trace (no host paths). */
export interface RepositoryFacts {
  name: string;
  base_commit: string;
  /** Digest of `.coding-agent.json` as committed; null when the base tree has none. */
  settings_digest: string | null;
  /** Where the test command came from: `settings`, `task`, or what detected it. */
  tests_source: string;
  tests: TestsSpec;
  acceptance: 'settings' | 'task' | null;
  /** Digest of AGENTS.md as committed, its size, and whether the model gets it cut. */
  instructions: { digest: string; bytes: number; cut: boolean } | null;
  /** Submodules of the base tree: recorded, not in the workspace, protected. */
  submodules: string[];
  /** Tree entries written to the workspace. */
  files: number;
  /** `setup` and `egress` of the settings, carried as given (not acted on yet). */
  setup: RepoSettings['setup'] | null;
  egress: RepoSettings['egress'] | null;
}

/** What the workflow passes to every run-scoped activity. */
export interface RunRef {
  run_id: string;
  /** The run's rules: its fixture's, or a repository run's (from its settings). */
  fixture: RunSpec;
  /** Fixture folder as given in the run's input: absolute, or relative to the worker's working directory ('' for a repository run). */
  fixture_dir: string;
  backend: 'local' | 'docker';
  /** False for a task's child run: the hidden acceptance cases judge the orchestrating run only. */
  hidden_acceptance?: boolean;
  /** A repository run: its repository and base commit (not for a task's run, whose workspace is its parent's). */
  repository?: RepositoryRef;
  /** The docker backend's image, when it is not the worker's own. */
  image?: string;
  /** A repository run's project instructions (AGENTS.md, capped): their digest in the host store. */
  instructions?: string | null;
  /** The user let the run change the files that configure its test runner (`--allow-test-config-change`). */
  allow_test_config_change?: boolean;
}

export type LoadRunResult =
  | {
      ok: true;
      fixture: RunSpec;
      fixture_dir: string;
      /** A repository run: its source and what its base said. */
      repository?: { ref: RepositoryRef; facts: RepositoryFacts };
      instructions?: string | null;
      /** The docker image of the run, when it is not the worker's own. */
      image?: string;
      replay: string | null;
      source: SourceRef;
      /** The loading host's own task queue. */
      host_queue: string | null;
      /** An orchestrating replay's task replays, by task title: digests in the host store. */
      child_replays: Record<string, string>;
      /** The build of the worker that loaded the run (host/build.ts). */
      build: string;
      /**
       * The run's trace id (32 hex digits), read from this activity's own span, when the loading
       * host exports traces; null otherwise (an id no receiver holds helps nobody). From history,
       * so every worker that replays the run reads the same id, whichever bundle it runs.
       */
      trace_id: string | null;
      /**
       * The run's budgets: its rules' overridden by its input, within the operator's maximums
       * (absent from histories recorded before the worker decided them: the workflow computed them).
       */
      budgets?: Budgets;
      /** The budgets the operator's maximums lowered. */
      capped?: CappedBudget[];
      /** A fork: its restored state (absent for any other run). */
      fork?: LoadedFork;
    }
  | {
      ok: false;
      reason: 'invalid_input' | 'replay_untrusted' | 'local_not_allowed' | 'repository_untrusted' | 'fork_unavailable';
      detail: string;
    };

/**
 * What a local activity answers when the worker running it is not on the run's host: the
 * workflow then calls the regular activity on the host's own queue.
 */
export interface Elsewhere {
  kind: 'elsewhere';
  /** The host queue of the worker that answered. */
  host_queue: string | null;
}

/** The activities of agentRun (and agentEval's host-lost probe uses none): what each takes and answers. */
export interface Activities {
  /** Reads and checks the fixture or repository and the decision source; nothing is created yet. */
  loadRun(input: ParsedRunInput): Promise<LoadRunResult>;
  /** The isolation evidence of the docker backend (for `image`, when the run has its own). */
  checkIsolation(image?: string): Promise<IsolationEvidence>;
  /**
   * A fresh workspace from the fixture or the repository, or (a task's run) from the parent run's
   * workspace, or (a fork, `fork` naming its plan in the host store) the forked run's after a turn.
   */
  prepareWorkspace(ref: WorkspaceSource): Promise<PreparedWorkspace>;
  /** The setup phase (SPEC section 11). */
  runSetup(ref: RunRef): Promise<SetupResult>;
  /** The setup's egress events from `offset` on, a page at a time. */
  setupEgress(ref: { run_id: string }, offset: number): Promise<EgressEvent[]>;
  /** merge_task's first half: the task's change as one action over its paths, or why it cannot merge. */
  prepareMerge(ref: RunRef, task: { task_id: string; run_id: string }): Promise<PrepareMergeOutcome>;
  /** merge_task's second half: the approved merge, exactly once; receipted like a write. */
  writeMerge(ref: RunRef, action: PendingAction, entriesRef: string): Promise<MergeOutcome & Written>;
  /** The next decision, and the build of the worker that took it. */
  decide(input: DecideInput): Promise<DecideResult>;
  /** `decide` of a replay as a local activity, on the run's host only. */
  localDecide(hostQueue: string | null, input: DecideInput): Promise<DecideResult | Elsewhere>;
  /** Stores trace events and transcript entries the workflow holds; returns the transcript's head. */
  persist(input: {
    run_id: string;
    trace: TraceEvent[];
    transcript: { head: string | null; append: PendingEntry[] };
    task_finishing?: boolean;
  }): Promise<string | null>;
  /** The read-only tools and run_tests; the full result stays in the store. */
  executeTool(ref: RunRef, view: CallView, timeoutMs: number): Promise<ResultView>;
  /** read_file, search or show_diff as a local activity, on the run's host only. */
  localTool(hostQueue: string | null, ref: RunRef, view: CallView, timeoutMs: number): Promise<ResultView | Elsewhere>;
  /** apply_patch's first half: every check, no side effect. */
  preparePatch(ref: RunRef, view: CallView): Promise<PreparePatchOutcome>;
  /** The approved write, whether the ledger holds its receipt now, and the workspace's digest after it. */
  writePatch(ref: RunRef, action: PendingAction, view: CallView): Promise<WriteOutcome & Written>;
  /** The candidate tests at the untouched base (once per tree and command on a host): taken before the run's first write. */
  baselineTests(ref: RunRef, timeoutMs: number): Promise<BaseTests>;
  /**
   * The host verifier: what "done" means. `finalRef`: the `final` decision it judges, in the host
   * store; a repository run keeps its text with the verified change (the commit message of `branch`).
   */
  verify(ref: RunRef, timeoutMs: number, finalRef?: string): Promise<VerifierFindings>;
  /** Changed paths of a run that ended before verification (empty when no workspace exists). */
  diffPaths(ref: { run_id: string }): Promise<string[]>;
}

/** Where `prepareWorkspace` makes a run's workspace from. */
export interface WorkspaceSource {
  run_id: string;
  fixture_dir: string;
  from_run?: string;
  repository?: RepositoryRef;
  /** A fork: the digest of its plan in the host store (LoadedFork). */
  fork?: string;
}

/**
 * What a write or merge activity adds to its outcome: whether the ledger holds its receipt, and
 * (once written, absent from results recorded before it was returned) the workspace's digest after it.
 */
export interface Written {
  receipted: boolean;
  workspace_digest?: string;
}

/** preparePatch's answer as history carries it: a pending action whose cut diff's whole text is in the host store. */
export type PreparePatchOutcome = Exclude<PrepareOutcome, { kind: 'prepared' }> | { kind: 'prepared'; action: PendingAction };

/** prepareMerge's answer: the entries of a prepared merge are in the host store under `entries_ref`. */
export type PrepareMergeOutcome =
  Exclude<MergePrepared, { kind: 'prepared' }> | { kind: 'prepared'; action: PendingAction; entries_ref: string };
