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
 */
import * as wf from '@temporalio/workflow';
import { ApplicationFailure, isCancellation } from '@temporalio/workflow';
import { runFacts, type RunFacts } from '../core/context';
import { BUDGET_DEFAULTS, budgetStop, callTimeoutMs, effectiveBudgets, type BudgetStop, type BudgetUse } from '../core/budgets';
import {
  addUsage,
  approvalSignalSchema,
  errorResult,
  okResult,
  runInputSchema,
  TERMINAL_STATUSES,
  type ApprovalSignal,
  type Budgets,
  type ParsedRunInput,
  type RunStatus,
  type ToolResult,
  type UnreceiptedChange,
} from '../core/contracts';
import { activityFailureReason, NON_RETRYABLE_FAILURE_TYPES, timeoutDetail } from '../core/failures';
import { isolationRefusal } from '../core/isolation';
import { APPROVAL_POLICIES, endsRedWindow, evaluatePolicy, parseApprover, type PolicyEvaluation } from '../core/policy';
import { buildRecord, type RunOutcome, type RunView } from '../core/run-view';
import { FIXTURE_ATTRIBUTE, REASON_ATTRIBUTE, STATUS_ATTRIBUTE } from '../core/search-attributes';
import { Trace, type TraceRequest, type TurnState } from '../core/trace';
import { snapshotVersion, type RunSnapshot, type SnapshotRequest } from '../core/delivery';
import { toolKind } from '../core/tools';
import { brief, resultView, type CallView, type DecisionView } from '../core/transcript';
import { formatIssues } from '../core/validate';
import {
  approvalSignal,
  interruptSignal,
  snapshotQuery,
  stateQuery,
  steerSignal,
  stopSignal,
  taskUpdateSignal,
  traceQuery,
} from './messages';
import { Orchestration } from './subruns';
import { initialState, type PendingWrite, type RunState } from './run-state';
import { RunMetrics } from './metrics';

export type { RunState };
import { Changes, LEGACY_CHANGES } from './changes';
import { LocalChains } from './local-chain';
import type { Activities, DecideResult, Elsewhere, LoadRunResult, MergeOutcome, RunRef, WriteOutcome, Written } from '../core/activities';
import type { RunReason } from '../core/reasons';

/** Trace events go to the host store in batches of at most this many bytes of JSON. */
const TRACE_BATCH_BYTES = 48 * 1024;
/** The run stores its trace once this much is held in workflow memory only. */
const TRACE_FLUSH_BYTES = 32 * 1024;
/** At most this much unstored trace is carried into the next segment. */
const TRACE_CARRY_BYTES = 16 * 1024;
/** A steering message is kept to this many characters. */
const MAX_STEER_CHARS = 4000;
/** Client message ids remembered for deduplication. */
const SEEN_MESSAGES = 256;

const MAX_MODEL_RETRIES = 2;
/**
 * Attempts of a step that runs the tests (run_tests, the verifier): a retried attempt runs them
 * all again, and an attempt that stops heartbeating means a worker died or hung during it.
 */
const TEST_ATTEMPTS = 3;
/** How long the base run of the tests may take beyond the tests' own timeout (copying the tree, reading the report). */
const BASELINE_MARGIN_MS = 60_000;
/** How long an ending orchestrating run waits for the tasks it stopped (a task on a lost host never answers). */
const TASKS_END_WAIT_MS = 60_000;
/** Builds a run's state names at most (the first, then the newest). */
const MAX_BUILDS = 8;
/** How long a write waits for a person by default: 7 days. */
const DEFAULT_APPROVAL_TIMEOUT_S = BUDGET_DEFAULTS.approval_timeout_s;
/** A live model's malformed calls in a row before the run ends `model_error`. */
const MAX_FORMAT_ERRORS = 3;
/** Distinct calls remembered between writes to tell a repeated call (a bound on the carried state). */
const MAX_RECENT_CALLS = 64;

/**
 * Every activity: bounded attempts (a crashed worker costs one each), and failures that would
 * repeat on every attempt are not retried at all (activities/index.ts marks them).
 */
const ACTIVITY_OPTIONS: wf.ActivityOptions = {
  startToCloseTimeout: '10 seconds',
  retry: {
    initialInterval: '500 milliseconds',
    maximumInterval: '5 seconds',
    maximumAttempts: 10,
    nonRetryableErrorTypes: [...NON_RETRYABLE_FAILURE_TYPES],
  },
};
/** The shared queue: a run's first activity, taken by whichever host is free. */
const sharedQueue = wf.proxyActivities<Activities>(ACTIVITY_OPTIONS);
const DEFAULT_HOST_LOST_S = 600;

/**
 * Every later activity goes to the queue of the host that loaded the run. A task that no worker
 * of that host picks up within `host_lost_s` means the host is gone (Temporal does not retry a
 * schedule-to-start timeout): the run ends `host_lost` rather than continue elsewhere.
 */
function hostActivities(queue: string | null, hostLostS: number | undefined): typeof sharedQueue {
  if (queue === null) return sharedQueue;
  return wf.proxyActivities<Activities>({
    ...ACTIVITY_OPTIONS,
    taskQueue: queue,
    scheduleToStartTimeout: (hostLostS ?? DEFAULT_HOST_LOST_S) * 1000,
  });
}

/**
 * Read-only steps as local activities (a replay's decision; read_file, search, show_diff): the
 * worker of the workflow task runs them, with no server round trip. With several hosts that
 * worker may not hold the run's workspace: the activity then answers `elsewhere` and the step
 * goes to the run's host as a regular activity. That answer is in history, so a replay takes
 * the same path.
 */
const local = wf.proxyLocalActivities<Activities>({ startToCloseTimeout: '10 seconds', retry: ACTIVITY_OPTIONS.retry });

const isElsewhere = (answer: object): answer is Elsewhere => (answer as { kind?: unknown }).kind === 'elsewhere';

/**
 * Local activities run inside one workflow task, and Signals, Queries, a cancellation and the
 * deadline's timer reach the run only between workflow tasks: after this many local activities
 * the run stores its trace (a regular activity, which ends the workflow task), so they wait for
 * at most that many. (A 1 ms timer would end it too, but the server fires short timers up to a
 * second late.)
 */
const LOCAL_ACTIVITIES_PER_TASK = 64;

function isHostLost(err: unknown): boolean {
  return err instanceof wf.ActivityFailure && err.cause instanceof wf.TimeoutFailure && err.cause.timeoutType === 'SCHEDULE_TO_START';
}

/** Ends the loop with a terminal status; thrown from helpers, caught once in the main function. */
class RunStop {
  constructor(
    readonly status: RunStatus,
    /** '' for a completed run: it has no reason. */
    readonly reason: RunReason | '',
    readonly detail: string | null = null,
  ) {}
}

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

class AgentRun {
  /** The run's state: one value, carried whole across continue-as-new. */
  readonly state: RunState;
  /** The trace: numbering, unstored events and a bounded window for queries. */
  trace: Trace;
  input!: ParsedRunInput;
  /** The activities of the host that holds the run; `hostLost` once it is found gone. */
  act = sharedQueue;
  private hostLost = false;
  /** Local activities since the run last let its workflow task end (see LOCAL_ACTIVITIES_PER_TASK). */
  private localActivities = 0;
  /** The tasks of an orchestrating run. */
  private readonly tasks: Orchestration;
  /** The scope of the loop: a parent's stop cancels it. */
  private loopScope: wf.CancellationScope | null = null;
  /** The scope of all the run's work from loading on (`prompt_messages`): a stop or a cancel request cancels it. */
  private runScope: wf.CancellationScope | null = null;
  /** The running step an interrupt cuts off (a tool call, a task_status wait, verification), or null. */
  private callScope: wf.CancellationScope | null = null;
  /** Set as the run records its end: a message arriving later is not taken (nothing is left to take it). */
  private ended = false;
  /** The governance metrics (not emitted while replaying). */
  private readonly metrics = new RunMetrics();
  /** Which changes this segment's history holds: asked before any other command (workflows/changes.ts). */
  private readonly changes = new Changes();
  /** The run's chains of local activities, and what reaches the run meanwhile (workflows/local-chain.ts). */
  private readonly chains = new LocalChains(this.changes.current);
  /** Whether the last read-only step ran here as a local activity (not elsewhere's answer). */
  private ranLocally = false;

  constructor(carried?: RunState) {
    this.state = carried ?? initialState(wf.workflowInfo().runId);
    this.trace = new Trace(this.state.trace);
    this.tasks = new Orchestration(this);
    wf.setHandler(stateQuery, () => this.state.view);
    wf.setHandler(traceQuery, (request?: TraceRequest) => this.trace.page(cleanRequest(request)));
    wf.setHandler(snapshotQuery, (request?: SnapshotRequest) => this.snapshot(request));
  }

  /**
   * The Signals. Set once the run's first facts are known and traced: a message sent with the
   * start, buffered until now, is then taken after `run_started` (a task's stop as a task's).
   */
  private listen(): void {
    wf.setHandler(stopSignal, (payload) => this.receive(() => this.onStop(payload)));
    wf.setHandler(approvalSignal, (payload) => this.receive(() => this.onApproval(payload)));
    wf.setHandler(interruptSignal, (payload) =>
      this.receive(() => {
        if (this.ended || this.repeated(payload?.message_id)) return;
        this.state.interrupted = typeof payload?.reason === 'string' ? payload.reason.slice(0, MAX_STEER_CHARS) : 'interrupted by the user';
        this.trace.add('interrupt_received', { reason: this.state.interrupted });
        this.callScope?.cancel();
      }),
    );
    wf.setHandler(steerSignal, (payload) =>
      this.receive(() => {
        const message = typeof payload?.message === 'string' ? payload.message.slice(0, MAX_STEER_CHARS) : '';
        if (this.ended || message === '' || this.repeated(payload?.message_id)) return;
        this.state.steering.push(message);
        this.trace.add('steer_received', { message });
      }),
    );
  }

  /**
   * The effect of something that reached the run (a Signal, a task's outcome or news, the
   * deadline's timer): now, or, while a chain of local activities is open, once its next step
   * has been issued (workflows/local-chain.ts).
   */
  receive(effect: () => void): void {
    this.chains.receive(effect);
  }

  /** A parent stops its task's run: the run's work is cancelled at once (before its loop: as it begins). */
  private onStop(payload: { reason?: unknown; message_id?: unknown } | undefined): void {
    if (this.ended) return;
    if (this.view.parent === null) {
      this.trace.add('stop_ignored', { reason: 'a run of its own is stopped by a cancel request, not by the stop Signal' });
      return;
    }
    if (this.repeated(payload?.message_id)) return;
    this.state.stop =
      typeof payload?.reason === 'string' && payload.reason !== '' ? payload.reason.slice(0, MAX_STEER_CHARS) : 'stopped by the parent run';
    this.trace.add('stop_received', { reason: this.state.stop });
    (this.runScope ?? this.loopScope)?.cancel();
  }

  private get view(): RunView {
    return this.state.view;
  }

  get ref(): RunRef {
    return this.state.ref!;
  }

  private get budgets(): Budgets {
    return this.state.view.budgets!;
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
  private repeated(id: unknown): boolean {
    if (typeof id !== 'string' || id === '') return false;
    if (this.state.seen_messages.includes(id)) return true;
    this.state.seen_messages.push(id);
    if (this.state.seen_messages.length > SEEN_MESSAGES) this.state.seen_messages.shift();
    return false;
  }

  async execute(input: ParsedRunInput): Promise<RunOutcome> {
    this.input = input;
    this.state.prompt_messages = this.changes.has(LEGACY_CHANGES.messages);
    const child = input.child ?? null;
    const refused = this.begin(input);
    this.listen();
    if (refused) return this.finish(refused);
    // A task runs on the host that holds its parent's workspace.
    if (child) this.pinTo(child.host_queue);
    const stop = await this.inRunScope(async () => {
      const loaded = await this.load(input);
      if (loaded instanceof RunStop) return loaded;
      this.adopt(input, loaded);
      return this.withDeadline(async () => {
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
        return (await this.setup()) ?? this.loop();
      });
    });
    return this.finish(stop);
  }

  /** The run's first facts (a reopened task goes on in its own workspace, transcript and trace numbering), and the input's own checks. */
  private begin(input: ParsedRunInput): RunStop | null {
    const child = input.child ?? null;
    if (child?.reopen) {
      this.view.run_id = child.reopen.run_id;
      this.trace = new Trace({ next_seq: child.reopen.next_seq, unstored: [] });
      this.state.transcript = { head: child.reopen.transcript_head, append: [] };
      this.state.cursor = child.reopen.cursor;
      this.state.steering.push(child.reopen.message);
    }
    this.view.backend = input.backend;
    this.view.approver = input.approver;
    if (input.repo) this.view.trust_repository = input.repo.trusted === true;
    if (child) this.view.parent = { workflow_id: child.parent_workflow_id, task_id: child.task_id, title: child.title };
    if (input.fork) this.view.forked_from = { workflow_id: input.fork.workflow_id, turn: input.fork.turn };
    this.trace.add('run_started', {
      source: input.source.kind,
      backend: input.backend,
      approver: input.approver,
      ...(input.repo ? { trust_repository: input.repo.trusted === true } : {}),
      ...(child ? { task_id: child.task_id, reopened: child.reopen !== null } : {}),
      ...(input.fork ? { forked_from: this.view.forked_from } : {}),
    });
    const approver = parseApprover(input.approver);
    if (approver.kind === 'policy' && !approver.known)
      return new RunStop('failed', 'invalid_input', `unknown approval policy ${input.approver}`);
    // A task's run is started by its parent only: Temporal names the parent, the input must agree.
    if (child && wf.workflowInfo().parent?.workflowId !== child.parent_workflow_id)
      return new RunStop('failed', 'invalid_input', 'the child input is for the run of a task: only its parent run starts it');
    return null;
  }

  /**
   * Nothing is created, and no key is read, before the fixture, the decision source, the trust
   * gate and the sandbox check out. The replay is read here, once, into the host store.
   */
  private async load(input: ParsedRunInput): Promise<Extract<LoadRunResult, { ok: true }> | RunStop> {
    let loaded: LoadRunResult;
    try {
      loaded = await this.act.loadRun(input);
    } catch (err) {
      const stop = failedStep(err, false, this.changes);
      if (stop === null) throw err;
      return stop;
    }
    if (!loaded.ok) return new RunStop('failed', loaded.reason, loaded.detail);
    this.noteBuild(loaded.build);
    this.pinTo(loaded.host_queue ?? null);
    // A repository run: what its base commit said (settings digest, tests, instructions digest).
    if (loaded.repository) this.trace.add('repository_loaded', { ...loaded.repository.facts, image: loaded.image ?? null });
    if (input.backend === 'docker') {
      const image: [string?] = loaded.image !== undefined ? [loaded.image] : [];
      const evidence = await this.onHost(() =>
        this.act.checkIsolation.executeWithOptions({ startToCloseTimeout: '3 minutes', summary: 'probe sandbox isolation' }, image),
      );
      if (evidence === null) return new RunStop('failed', 'host_lost', this.hostLostDetail());
      this.view.isolation = evidence;
      this.trace.add('isolation_checked', evidence);
      if (!evidence.verified) return new RunStop('failed', 'isolation_unverified', isolationRefusal(evidence));
    }
    if (input.source.kind === 'provider' && !(input.backend === 'docker' && this.view.isolation?.verified))
      return new RunStop('failed', 'isolation_unverified', 'a live model provider runs only on the docker backend with verified isolation');
    return loaded;
  }

  /** What the loaded run is: its source, sub-runs, budgets, deadline and the reference every later activity gets. */
  private adopt(input: ParsedRunInput, loaded: Extract<LoadRunResult, { ok: true }>): void {
    const child = input.child ?? null;
    this.state.source = loaded.source;
    this.state.child_replays = loaded.child_replays;
    // Sub-runs: the input's, else the fixture's; a task's run only what its parent passed on.
    this.state.subruns = child ? (input.subruns ?? null) : (input.subruns ?? loaded.fixture.subruns ?? null);
    if (this.state.subruns) {
      this.view.subruns = { counts: { dispatched: 0, messages: 0, stops: 0, merges: 0, unknown_task: 0, messages_to_ended: 0 }, tasks: [] };
      this.view.tasks_spent = { runs: 0, turns: 0, tool_calls: 0, usage: null };
      // Tasks draw on this run's budgets (allotments, waits, refused dispatches): commands that
      // histories recorded before it never issued.
      this.state.tree_budgets = this.changes.has(LEGACY_CHANGES.treeBudgets);
    }
    // The run's trace, named only when the loading host exports it (histories recorded before
    // loadRun returned the id have none).
    this.view.trace_id = loaded.trace_id ?? null;
    this.view.fixture = loaded.fixture.id;
    this.view.task = loaded.fixture.task;
    this.view.replay = loaded.replay;
    this.view.replay_digest = loaded.source.kind === 'replay' ? loaded.source.digest : null;
    this.view.prompt = loaded.source.kind === 'provider' ? (loaded.source.prompt ?? null) : null;
    // The worker decides the budgets (within its operator's maximums); histories from before it did have none.
    this.view.budgets = loaded.budgets ?? effectiveBudgets(loaded.fixture.budgets, input.budgets);
    if (loaded.capped?.length) this.trace.add('budgets_capped', { capped: loaded.capped });
    this.state.deadline_at = this.now() + this.budgets.deadline_s * 1000;
    this.state.ref = {
      run_id: this.view.run_id,
      fixture: loaded.fixture,
      fixture_dir: loaded.fixture_dir,
      backend: input.backend,
      ...(child ? { hidden_acceptance: false } : {}),
      ...(loaded.repository ? { repository: loaded.repository.ref } : {}),
      ...(loaded.instructions ? { instructions: loaded.instructions } : {}),
      ...(loaded.image !== undefined ? { image: loaded.image } : {}),
      ...(input.allow_test_config_change ? { allow_test_config_change: true } : {}),
    };
    wf.upsertSearchAttributes([{ key: FIXTURE_ATTRIBUTE, value: loaded.fixture.id }]);
    // A fork goes on from the forked run's turn: its transcript, its replay's cursor, its turn count.
    if (loaded.fork) {
      this.state.transcript = { head: loaded.fork.transcript, append: [] };
      this.state.cursor = loaded.fork.cursor;
      this.state.plan = loaded.fork.stated_plan ?? null;
      this.view.counters.turns = input.fork!.turn;
    }
    this.setStatus('running');
  }

  /** The next segment of a run that continued as new: the state it carried, the same workspace. */
  async resume(input: ParsedRunInput): Promise<RunOutcome> {
    this.input = input;
    // A segment of a run that began before the change takes it from its own start on.
    this.state.prompt_messages ??= this.changes.has(LEGACY_CHANGES.messages);
    this.listen();
    this.pinTo(this.state.host_queue);
    const pending = this.state.pending_write;
    this.state.pending_write = null;
    this.setStatus(this.view.status);
    const stop = await this.inRunScope(() =>
      this.withDeadline(async () => {
        if (pending) this.observe(await this.approveAndWrite(pending));
        return (await this.runReply(this.state.reply_rest, false)) ?? this.loop();
      }),
    );
    return this.finish(stop);
  }

  // ---- the setup phase ----

  /**
   * The setup phase (SPEC section 11), before the first decision: the setup's commands run in the
   * run's container behind the egress proxy (or an earlier run's image with the same inputs is
   * used), its products join the workspace's baseline, and from then on the run's image is the
   * setup image, probed again with no network. Null when the run goes on.
   */
  private async setup(): Promise<RunStop | null> {
    const spec = this.ref.fixture.setup;
    if (!spec) return null;
    const egress = this.ref.fixture.egress ?? null;
    this.view.setup = { status: 'running', key: null, image_id: null, commands: 0, egress: { allowed: 0, denied: 0 }, isolation: null };
    this.trace.add('setup_started', {
      commands: spec.commands.length,
      timeout_s: spec.timeout_s,
      allow: egress?.allow ?? [],
      methods: egress?.methods ?? null,
      tls: egress?.tls ?? 'tunnel',
      credentials: egress?.credentials ?? [],
    });
    const r = await this.act.runSetup.executeWithOptions(
      {
        startToCloseTimeout: (spec.timeout_s + 600) * 1000,
        heartbeatTimeout: '60 seconds',
        cancellationType: wf.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        retry: { ...ACTIVITY_OPTIONS.retry, maximumAttempts: 3 },
        summary: `setup: ${spec.commands.length} command(s)`,
      },
      [this.ref],
    );
    if (r.isolation) this.trace.add('isolation_checked', { phase: 'setup', ...r.isolation });
    if (r.ok && r.cached) this.trace.add('setup_cached', { key: r.key, image_id: r.image_id });
    for (const command of r.commands) this.trace.add('setup_command', command);
    // Every request is an event: the result has the first page, the host keeps the rest.
    let events = r.egress.events;
    for (let at = 0; events.length > 0;) {
      for (const { allowed, ...request } of events) this.trace.add(allowed ? 'egress_allowed' : 'egress_denied', request);
      at += events.length;
      events =
        at < r.egress.events.length + r.egress.rest
          ? await this.act.setupEgress.executeWithOptions({ summary: `egress events from ${at}` }, [{ run_id: this.ref.run_id }, at])
          : [];
    }
    const counts = { allowed: r.egress.allowed, denied: r.egress.denied };
    this.view.setup = {
      status: r.ok ? (r.cached ? 'cached' : 'ran') : 'failed',
      key: r.key,
      image_id: r.ok ? r.image_id : null,
      commands: r.commands.length,
      egress: counts,
      isolation: r.isolation,
    };
    this.trace.add('setup_finished', {
      ok: r.ok,
      key: r.key,
      ...(r.ok ? { cached: r.cached, image_id: r.image_id, added: r.added } : { reason: r.reason, detail: r.detail }),
      ...counts,
      omitted: r.egress.omitted,
    });
    if (!r.ok) return new RunStop('failed', r.reason, r.detail);
    this.state.workspace_digest = r.workspace_digest ?? null;
    // Every later test and acceptance process runs in the setup image, which is probed like any image.
    this.state.ref = { ...this.ref, image: r.image_id };
    const evidence = await this.act.checkIsolation.executeWithOptions(
      { startToCloseTimeout: '3 minutes', summary: 'probe the setup image' },
      [r.image_id],
    );
    this.view.isolation = evidence;
    this.trace.add('isolation_checked', { phase: 'after_setup', ...evidence });
    if (!evidence.verified) return new RunStop('failed', 'isolation_unverified', `after setup: ${isolationRefusal(evidence)}`);
    return null;
  }

  // ---- the loop ----

  private async loop(): Promise<RunStop> {
    for (;;) {
      const limit = await this.limit();
      if (limit !== null) {
        if (limit === 'max_turns') await this.wrapUp();
        if (limit === 'max_cost_usd')
          this.view.cost_limit = { max_cost_usd: this.budgets.max_cost_usd!, spent_usd: this.used().cost_usd ?? 0, next_call_usd: null };
        return new RunStop('budget_exhausted', limit);
      }
      if (this.mayContinueAsNew()) await this.continueAsNew(null);
      if (this.trace.unstoredBytes() > TRACE_FLUSH_BYTES) await this.storeTrace();
      this.view.counters.turns++;
      const decisions = await this.decide(true);
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
          if (interrupted === null) return this.verify(decision.text);
          this.finalInterrupted(interrupted, 'decision');
          return null;
        }
      }
    }
    return null;
  }

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
  private takeInterrupt(): string {
    const reason = this.state.interrupted ?? 'interrupted';
    this.state.interrupted = null;
    if (this.state.prompt_messages) this.state.turn_interrupted = reason;
    return reason;
  }

  /**
   * An interrupt reached a `final` while it was decided or verified: it is not verified, the run
   * goes on, and the next request says why.
   */
  private finalInterrupted(reason: string, during: 'decision' | 'verification'): void {
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
  private async interruptible<T>(step: () => Promise<T>): Promise<T | null> {
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

  /**
   * Asks the decision source for the next reply (one decision for a replay, one or more for a
   * live model), retrying transient errors at most twice, after the delay the provider asked for.
   */
  private async decide(toolsEnabled: boolean): Promise<DecisionView[]> {
    const source = this.state.source!;
    const live = source.kind === 'provider';
    for (let retries = 0; ;) {
      const result = await this.requestDecision(toolsEnabled, retries);
      this.state.transcript = { head: result.head, append: [] };
      this.noteBuild(result.build);
      if (result.usage) {
        this.addUsage(result, retries);
        if (live) this.metrics.modelCall(source.provider, result.usage, 'compacted' in result && result.compacted === true);
      }
      switch (result.kind) {
        case 'exhausted':
          throw new RunStop('failed', 'replay_exhausted', 'the replay has no decision left');
        case 'refused':
          throw new RunStop('failed', 'model_refused', result.detail);
        case 'over_budget':
          await this.overBudget(result);
          continue;
        case 'decisions':
          this.state.cursor = result.cursor;
          this.state.notice = null;
          return result.decisions;
        case 'model_error': {
          this.state.cursor = result.cursor;
          if (result.ref !== null) this.state.transcript.append.push({ decision: result.ref });
          if (!result.transient) throw new RunStop('failed', 'model_error', result.detail);
          if (retries >= MAX_MODEL_RETRIES)
            throw new RunStop('failed', 'model_error', `transient errors persisted after ${MAX_MODEL_RETRIES} retries: ${result.detail}`);
          this.view.counters.model_retries++;
          const delay = result.retry_after_ms ?? (live ? 500 * 2 ** retries : 0);
          this.metrics.modelRetry(delay);
          this.trace.add('model_retry', { attempt: retries + 1, detail: result.detail, delay_ms: delay });
          this.state.notice = result.cut_off
            ? 'your previous reply was cut off by the output limit and none of its calls ran; keep each reply and each call shorter'
            : null;
          if (delay > 0) await wf.sleep(delay);
          retries++;
        }
      }
    }
  }

  /** One request to the decision source: the messages that arrived, traced, then the activity (a local one for a replay). */
  private async requestDecision(toolsEnabled: boolean, retries: number): Promise<DecideResult> {
    const source = this.state.source!;
    const live = source.kind === 'provider';
    // What the turn starts from (a fork after the previous turn restores it): before this request's messages.
    const start = retries === 0 && toolsEnabled && this.changes.has(LEGACY_CHANGES.turnState) ? { start: this.turnState() } : {};
    // An interrupt that arrived while no turn ran (loading, between turns, a continue-as-new) has
    // nothing to stop: the model reads it with this request, and its reply runs.
    if (this.state.prompt_messages && this.state.interrupted !== null) {
      this.state.steering.push(`interrupt: ${this.state.interrupted}`);
      this.state.interrupted = null;
    }
    const messages = this.state.steering.splice(0);
    for (const message of messages) this.state.transcript.append.push({ message });
    // Messages about tasks are pinned: compaction never drops them.
    const notes = this.state.task_messages.splice(0);
    for (const message of notes) this.state.transcript.append.push({ message, pinned: true });
    // A live request names the prompt version it is built with (absent in runs that started before prompts were versioned).
    const prompt = live && this.view.prompt ? { prompt_version: this.view.prompt.version, prompt_digest: this.view.prompt.digest } : {};
    this.trace.add('model_requested', {
      turn: this.view.counters.turns,
      tools_enabled: toolsEnabled,
      messages: [...messages, ...notes],
      ...prompt,
      ...(retries > 0 ? { retry: retries } : {}),
      ...start,
    });
    const input = {
      run_id: this.ref.run_id,
      source,
      cursor: this.state.cursor,
      turn: this.view.counters.turns,
      retry: retries,
      tools_enabled: toolsEnabled,
      orchestrating: this.state.subruns !== null,
      tasks:
        this.state.subruns !== null ? Object.fromEntries((this.view.subruns?.tasks ?? []).map((t) => [t.title, t.task_id])) : undefined,
      transcript: this.state.transcript,
      facts: live ? this.facts(toolsEnabled) : null,
      ...(live && this.budgets.max_cost_usd !== undefined
        ? { cost_room_usd: this.budgets.max_cost_usd - (this.used().cost_usd ?? 0) }
        : {}),
    };
    const options = { startToCloseTimeout: callTimeoutMs(this.budgets, this.msLeft()), summary: `decide turn ${this.view.counters.turns}` };
    return live
      ? // A live request heartbeats, so a cancelled run aborts it.
        await this.act.decide.executeWithOptions(
          { ...options, heartbeatTimeout: '10 seconds', cancellationType: wf.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED },
          [input],
        )
      : await this.readOnly(
          () => local.localDecide.executeWithOptions(options, [this.state.host_queue, input]),
          () => this.act.decide.executeWithOptions(options, [input]),
        );
  }

  /**
   * The next call could cost more than the budget has left. Tasks hold part of it: once one gives
   * back what it did not use, the caller asks again; otherwise the run ends at its budget.
   */
  private async overBudget(result: Extract<DecideResult, { kind: 'over_budget' }>): Promise<void> {
    if (this.state.tree_budgets && this.tasks.active() && result.estimate_usd <= result.room_usd + this.tasks.held().cost_usd) {
      this.trace.add('budget_wait', { budget: 'max_cost_usd', next_call_usd: result.estimate_usd, room_usd: result.room_usd });
      await this.tasks.nextEnd();
      return;
    }
    this.view.cost_limit = {
      max_cost_usd: this.budgets.max_cost_usd!,
      spent_usd: this.budgets.max_cost_usd! - result.room_usd,
      next_call_usd: result.estimate_usd,
    };
    throw new RunStop(
      'budget_exhausted',
      'max_cost_usd',
      `the next call could cost up to $${result.estimate_usd.toFixed(6)}, and $${result.room_usd.toFixed(6)} of max_cost_usd is left`,
    );
  }

  /** The authoritative facts a live model's context is rebuilt from. */
  private facts(toolsEnabled: boolean): RunFacts {
    const v = this.view.verification;
    const pending = this.view.pending_approval;
    return runFacts(this.ref.fixture, {
      ...(this.ref.instructions ? { instructions: this.ref.instructions } : {}),
      status: this.view.status,
      turn: this.view.counters.turns,
      counters: { turns: this.view.counters.turns, tool_calls: this.view.counters.tool_calls, writes: this.view.counters.writes },
      budgets: this.budgets,
      plan: this.state.plan,
      pending_action: pending ? { action_id: pending.action_id, path: pending.path, before: pending.before, after: pending.after } : null,
      verification: v
        ? { passed: v.passed, protected_changed: v.protected_changed, candidate_tests: v.candidate_tests, acceptance: v.acceptance }
        : null,
      notice: toolsEnabled
        ? this.state.notice
        : 'the turn limit is reached and tools are disabled: reply without tool calls, with a summary of what was done and what is left',
      tasks: this.view.subruns?.tasks ?? null,
      orchestrating: this.state.subruns !== null,
    });
  }

  /** A build that took part in the run, once (results recorded before builds were reported carry none). */
  private noteBuild(build: string | undefined): void {
    const builds = (this.view.builds ??= []);
    if (build === undefined || builds.includes(build)) return;
    // A long run's workers are rebuilt rarely; the first and the newest few are what matter.
    if (builds.length >= MAX_BUILDS) builds.splice(1, 1);
    builds.push(build);
  }

  /** One call's usage added to the run's; a live call's prompt-cache facts counted and traced. */
  private addUsage(result: DecideResult, retry: number): void {
    const step = result.usage!;
    this.view.usage = addUsage(this.view.usage, step);
    if (result.kind === 'exhausted' || result.kind === 'over_budget' || result.cache === undefined) return;
    const cache = result.cache;
    const counted = (this.view.prompt_cache ??= { hits: 0, write_tokens: 0 });
    if (cache.hit) counted.hits++;
    counted.write_tokens += cache.write_tokens;
    this.trace.add('model_usage', {
      turn: this.view.counters.turns,
      ...(retry > 0 ? { retry } : {}),
      input_tokens: step.input_tokens,
      output_tokens: step.output_tokens,
      cached_tokens: step.cached_tokens,
      cache_write_tokens: cache.write_tokens,
      cache_hit: cache.hit,
      cost_usd: step.cost_usd,
      from_store: result.from_store === true,
    });
  }

  /** After the turn limit: one more decision with tools disabled, kept as the run's summary. */
  private async wrapUp(): Promise<void> {
    try {
      for (const decision of await this.decide(false)) {
        if (decision.kind === 'final') this.view.wrap_up = decision.text;
        if (decision.kind !== 'tool') {
          this.state.transcript.append.push({ decision: decision.ref, reply: decision.reply });
          continue;
        }
        // Tools are disabled: a call still gets its one result, and does not run.
        this.state.in_flight = {
          call_id: decision.call?.call_id ?? decision.invalid!.call_id,
          decision_ref: decision.ref,
          reply: decision.reply,
        };
        this.observe(
          errorResult(this.state.in_flight.call_id, 'interrupted', { reason: 'not executed: tools are disabled after the turn limit' }),
          false,
        );
      }
      this.trace.add('wrap_up_recorded', { summary: this.view.wrap_up });
    } catch (err) {
      if (!(err instanceof RunStop)) throw err;
      this.trace.add('wrap_up_recorded', { summary: null, error: err.reason });
    }
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
    if (interrupted !== null) return this.interruptedResult(callId, interrupted);
    // The table's kind decides who carries the call out (core/tools.ts).
    const kind = toolKind(call.name);
    if (kind === 'write') return this.patch(decision.ref, decision.reply, call, evaluatePolicy(call, call.path, this.ref.fixture));
    if (kind === 'orchestration') {
      const orchestrate = () => this.tasks.call(decision.ref, decision.reply, call);
      // Of these only task_status's wait is cut off: the others start, signal or write.
      if (call.name !== 'task_status') return orchestrate();
      return (await this.interruptible(orchestrate)) ?? this.interruptedResult(callId, this.takeInterrupt(), 'cut off');
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
    const result = await this.interruptible(() =>
      kind === 'read'
        ? this.readOnly(() => local.localTool.executeWithOptions(options, [this.state.host_queue, this.ref, call, timeout]), remote)
        : remote(),
    );
    // Cut off by an interrupt: a test run's process tree is gone (the activity waits for that).
    if (result === null) return this.interruptedResult(callId, this.takeInterrupt(), 'cut off');
    if (kind === 'test' && result.error === 'tests_failed' && !this.state.wrote_writable) this.view.red_observed = true;
    if (result.unreceipted) this.unreceipted(result.unreceipted, callId);
    return result;
  }

  /** A test or acceptance process changed the workspace: the change was undone; traced and counted. */
  private unreceipted(change: UnreceiptedChange, callId?: string): void {
    this.trace.add('unreceipted_change', change, callId ? { call_id: callId } : {});
    this.view.counters.unreceipted_changes = (this.view.counters.unreceipted_changes ?? 0) + 1;
  }

  private interruptedResult(callId: string, reason: string, how: 'not executed' | 'cut off' = 'not executed'): ToolResult {
    return errorResult(callId, 'interrupted', { reason: `${how}: ${reason}` });
  }

  /**
   * The one result of the call in flight: traced and added to the transcript, and counted in
   * `tool_errors` unless the harness made it up because the run ended (the model never saw it).
   */
  private observe(result: ToolResult & { ref?: string | null; tests_ref?: string }, counted = true): void {
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

  /** prepare -> approve -> write, each write keyed by its action_id. */
  private async patch(decisionRef: string, reply: string | null, call: CallView, policy: PolicyEvaluation): Promise<ToolResult> {
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
  async approveAndWrite(pending: PendingWrite): Promise<ToolResult> {
    const { call, action } = pending;
    const decision = await this.awaitApproval(pending);
    if (decision === 'interrupted') return this.interruptedResult(call.call_id, this.takeInterrupt());
    if (decision.decision === 'reject') {
      return errorResult(call.call_id, 'approval_rejected', {
        action_id: action.action_id,
        principal: decision.principal ?? null,
        reason: decision.reason ?? null,
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
  private async awaitApproval(pending: PendingWrite): Promise<ApprovalSignal | 'interrupted'> {
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
    this.setStatus('awaiting_approval');
    // No worker resources are held while waiting: this is a durable condition on workflow state.
    // A wait can be long and signals (ignored approvals, steering) grow its history: when Temporal
    // suggests continue-as-new, the next segment waits instead, with the pending action carried.
    const answered = () => this.state.approval !== null || this.state.interrupted !== null;
    this.state.approval_deadline_at ??= this.now() + (this.budgets.approval_timeout_s ?? DEFAULT_APPROVAL_TIMEOUT_S) * 1000;
    this.state.waiting_since = this.now();
    const inTime = await wf.condition(
      () => answered() || this.mayContinueAsNew(),
      Math.max(1, this.state.approval_deadline_at - this.now()),
    );
    // Since the write was first asked for, across continue-as-new (the timeout runs from then too).
    const timeoutS = this.budgets.approval_timeout_s ?? DEFAULT_APPROVAL_TIMEOUT_S;
    const waitedS = () => (this.now() - (this.state.approval_deadline_at! - timeoutS * 1000)) / 1000;
    this.resumeDeadline();
    if (!inTime) {
      this.metrics.approvalWait(waitedS(), 'timeout');
      throw new RunStop('budget_exhausted', 'approval_timeout', `no approval for ${action.path} within ${timeoutS} s`);
    }
    if (!answered()) await this.continueAsNew(pending);
    this.metrics.approvalWait(waitedS(), this.state.approval?.decision ?? 'interrupted');
    this.state.approval_deadline_at = null;
    const decision = this.state.approval;
    this.view.pending_approval = null;
    this.state.approval = null;
    this.setStatus('running');
    return decision ?? 'interrupted';
  }

  private onApproval(payload: unknown): void {
    const parsed = approvalSignalSchema.safeParse(payload);
    const pending = this.view.pending_approval;
    const ignore = (why: string, actionId?: string) =>
      this.trace.add('approval_ignored', { reason: why }, actionId ? { action_id: actionId } : {});
    if (!parsed.success) return void ignore(`invalid approval payload: ${formatIssues(parsed.error)}`);
    const signal = parsed.data;
    if (this.repeated(signal.message_id)) return;
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
      const base = await this.act.baselineTests.executeWithOptions(
        {
          startToCloseTimeout: timeout,
          heartbeatTimeout: '10 seconds',
          retry: { ...ACTIVITY_OPTIONS.retry, maximumAttempts: TEST_ATTEMPTS },
          cancellationType: wf.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
          summary: 'candidate tests at the base',
        },
        [this.ref, timeout],
      );
      this.view.base_tests = base;
      this.trace.add('baseline_tests', base);
    } catch (err) {
      if (isCancellation(err) || !(err instanceof wf.ActivityFailure) || this.noteHostLost(err)) throw err;
      this.trace.add('baseline_tests', { status: 'error', detail: err.cause?.message ?? err.message });
    }
  }

  // ---- verification, continue-as-new and the end ----

  /** The host verifier's judgement of a `final`; null when an interrupt cut it off and the run goes on. */
  private async verify(finalText: string): Promise<RunStop | null> {
    this.view.final_summary = brief(finalText) as string;
    this.setStatus('verifying');
    this.trace.add('verification_started', { final: finalText });
    const timeout = Math.max(1000, this.msLeft());
    const findings = await this.interruptible(() =>
      this.act.verify.executeWithOptions(
        {
          startToCloseTimeout: timeout,
          heartbeatTimeout: '10 seconds',
          retry: { ...ACTIVITY_OPTIONS.retry, maximumAttempts: TEST_ATTEMPTS },
          cancellationType: wf.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
          summary: 'verify',
        },
        [this.ref, timeout],
      ),
    );
    if (findings === null) {
      this.setStatus('running');
      this.finalInterrupted(this.takeInterrupt(), 'verification');
      return null;
    }
    this.view.verification = findings;
    for (const change of findings.unreceipted ?? []) this.unreceipted(change);
    if (findings.passed) {
      this.trace.add('verification_passed', findings);
      return new RunStop('completed', '');
    }
    this.trace.add('verification_failed', findings);
    const protocolError = findings.acceptance?.error ?? null;
    return new RunStop('failed', protocolError !== null ? 'verification_error' : 'verification_failed', protocolError);
  }

  /**
   * Continues as new under the same workflow id: the trace and transcript are stored first, and
   * the next segment gets the state (counters, budgets, deadline, pending write, an approval
   * already received) but no contents.
   */
  private async continueAsNew(pendingWrite: PendingWrite | null): Promise<never> {
    const info = this.chains.figures();
    // A newer build is the deployment's current version: the next segment starts on it, unless a
    // write waits for its approval, which the build that prepared it carries to its end
    // (docs/versioning.md).
    const upgrade = info.targetWorkerDeploymentVersionChanged && pendingWrite === null;
    this.trace.add('continued_as_new', {
      segment: this.view.segment,
      history_events: info.historyLength,
      history_bytes: info.historySize,
      pending_action: pendingWrite?.action.action_id ?? null,
      to_current_version: upgrade,
    });
    await this.storeTrace();
    await wf.condition(wf.allHandlersFinished);
    // Signals that arrived while storing are in workflow state now, and are carried, with their
    // trace events (stored again first if a burst of them made those many).
    while (this.trace.unstoredBytes() > TRACE_CARRY_BYTES) await this.storeTrace();
    this.view.segment++;
    this.state.pending_write = pendingWrite;
    if (pendingWrite === null) this.state.reply_rest = [];
    this.state.trace = this.trace.carried();
    if (!upgrade) return wf.continueAsNew<typeof agentRun>(this.input, this.state);
    return wf.makeContinueAsNewFunc<typeof agentRun>({ initialVersioningBehavior: 'AUTO_UPGRADE' })(this.input, this.state);
  }

  /**
   * Stores the trace events held only here, and the transcript entries not stored yet.
   * `finishing`: the run's last store, before its outcome goes back (a task's run marks it for the crash tests).
   * `once`: a single attempt (a run that ended because its state folder was full does not wait for space again).
   */
  private async storeTrace(finishing = false, once = false): Promise<void> {
    const batches = this.trace.flushable(TRACE_BATCH_BYTES);
    if (batches.length === 0) batches.push([]);
    const retry = once ? { retry: { ...ACTIVITY_OPTIONS.retry, maximumAttempts: 1 } } : {};
    for (const [i, events] of batches.entries()) {
      const last = i === batches.length - 1;
      const head = await this.act.persist.executeWithOptions({ summary: `store ${events.length} trace events`, ...retry }, [
        {
          run_id: this.view.run_id,
          trace: events,
          transcript: last ? this.state.transcript : { head: this.state.transcript.head, append: [] },
          ...(finishing && last && this.view.parent ? { task_finishing: true } : {}),
        },
      ]);
      this.trace.markStored(events.length);
      if (last) this.state.transcript = { head, append: [] };
    }
  }

  /**
   * The run's work from loading on, in one scope that a stop or a cancel request cancels at once
   * (a stop that arrived earlier, with the start or carried, cancels it as it begins); what ends
   * it becomes the run's end. A run that began before `prompt_messages` loads outside any scope,
   * as it ran.
   */
  private async inRunScope(work: () => Promise<RunStop>): Promise<RunStop> {
    if (!this.state.prompt_messages) return work();
    const scope = new wf.CancellationScope();
    this.runScope = scope;
    if (this.state.stop !== null) scope.cancel();
    try {
      return await scope.run(work);
    } catch (err) {
      return this.endOf(err);
    } finally {
      this.runScope = null;
    }
  }

  /**
   * Runs `body` under the run's deadline (a workflow timer). When the deadline and an external
   * cancellation coincide, both are kept and the reason is `cancelled`.
   */
  private async withDeadline(body: () => Promise<RunStop>): Promise<RunStop> {
    const loopScope = new wf.CancellationScope();
    this.loopScope = loopScope;
    const timerScope = new wf.CancellationScope();
    timerScope
      .run(async () => {
        // The deadline bounds the agent's working time: it does not run while a person decides.
        // What the timer's firing means is decided where a Signal would take effect (receive).
        for (;;) {
          await wf.sleep(Math.max(1, this.msLeft()));
          const next = await new Promise<'wait' | 'end' | 'again'>((resolve) =>
            this.receive(() => resolve(this.state.waiting_since !== null ? 'wait' : this.msLeft() <= 0 ? 'end' : 'again')),
          );
          if (next === 'wait') await wf.condition(() => this.state.waiting_since === null);
          else if (next === 'end') return;
        }
      })
      .then(() => {
        this.view.deadline_reached = true;
        loopScope.cancel();
      })
      .catch(() => undefined); // the timer is cancelled when the body ends first
    try {
      return await loopScope.run(body);
    } catch (err) {
      return this.endOf(err);
    } finally {
      timerScope.cancel();
      this.loopScope = null;
    }
  }

  /** What the error that ended the run's work means: a stop, a cancel request, the deadline, a lost host, a failure. */
  private endOf(err: unknown): RunStop {
    if (err instanceof RunStop) return err;
    // A parent stopped this task's run: its cut-off call gets its result in finish().
    if (isCancellation(err) && this.state.stop !== null) return new RunStop('cancelled', 'interrupted', this.state.stop);
    if (isCancellation(err)) {
      if (wf.CancellationScope.current().consideredCancelled)
        return new RunStop('cancelled', 'cancelled', this.view.deadline_reached ? 'the deadline was also reached' : null);
      if (this.view.deadline_reached) return new RunStop('budget_exhausted', 'deadline');
    }
    if (this.noteHostLost(err)) return new RunStop('failed', 'host_lost', this.hostLostDetail());
    const stop = failedStep(err, true, this.changes);
    if (stop === null) throw err;
    return stop;
  }

  /**
   * Records the terminal status. A call still without a result gets one now, so no proposed call
   * is left unanswered. A cancelled run also returns normally (Temporal shows it as completed,
   * the AgentStatus search attribute as cancelled), so its record stays in its result.
   */
  async finish(stop: RunStop): Promise<RunOutcome> {
    await this.endTasks(stop.reason);
    if (this.state.in_flight !== null) {
      this.observe(
        errorResult(this.state.in_flight.call_id, 'interrupted', {
          reason: `not completed: the run ended (${stop.reason})`,
          run_end: stop.reason,
        }),
        false,
      );
    }
    this.view.pending_approval = null;
    this.view.reason = stop.reason === '' ? null : stop.reason;
    this.view.detail = stop.detail;
    this.view.unread = this.unread();
    this.ended = true;
    this.trace.add('run_finished', {
      status: stop.status,
      reason: this.view.reason,
      detail: stop.detail,
      deadline_reached: this.view.deadline_reached,
      builds: this.view.builds ?? [],
      ...(this.changes.has(LEGACY_CHANGES.turnState) ? { end: this.turnState() } : {}),
      ...(this.view.unread ? { unread: this.view.unread } : {}),
    });
    // A lost host's store is gone with it: the trace then lives in history only.
    if (!this.hostLost) {
      const notStored = await this.storeAtEnd(stop);
      // The outcome stands (it was reached on the host); only its trace is not stored.
      if (notStored !== null) this.view.detail = [stop.detail, `trace not stored: ${notStored}`].filter(Boolean).join('; ');
    }
    this.setStatus(stop.status);
    this.metrics.finished({
      status: stop.status,
      reason: this.view.reason,
      turns: this.view.counters.turns,
      task: this.view.parent !== null,
      deadlineReached: this.view.deadline_reached,
      costUsd: this.view.usage?.cost_usd ?? null,
    });
    const record = buildRecord(this.view);
    return {
      record,
      state: this.view,
      trace: { run_id: this.view.run_id, events: this.trace.next - 1 },
      transcript: this.state.transcript.head,
      cursor: this.state.cursor,
    };
  }

  /**
   * The run's last store (and its changed paths, when it never reached the verifier); why not,
   * when it could not be: its host is gone, or the store failed for good (a state folder still
   * full after the wait, for which a run that ended `disk_full` tries once).
   */
  private async storeAtEnd(stop: RunStop): Promise<string | null> {
    try {
      const stored = await this.onHost(() =>
        wf.CancellationScope.nonCancellable(async () => {
          if (this.view.verification === null && this.state.ref)
            this.view.diff_paths = await this.act.diffPaths({ run_id: this.ref.run_id });
          await this.storeTrace(true, stop.reason === 'disk_full');
          return true;
        }),
      );
      return stored === null ? this.hostLostDetail() : null;
    } catch (err) {
      if (!(err instanceof wf.ActivityFailure) || !this.changes.has(LEGACY_CHANGES.endsWithRecord)) throw err;
      return err.cause?.message ?? err.message;
    }
  }

  /**
   * Messages no decision read because the run ended first (a steer during the verification that
   * ended it, say): kept with its end, so none is lost without a word. Null when there are none.
   */
  private unread(): RunView['unread'] {
    const messages = [...this.state.steering];
    const interrupt = this.state.interrupted;
    return messages.length > 0 || interrupt !== null ? { messages, interrupt } : null;
  }

  // ---- budgets ----

  /**
   * What counts against the run's budgets: its own turns, tool calls, tokens and cost and, for an
   * orchestrating run, what its tasks spent and (`held`) what the running ones hold.
   */
  used(held = true): BudgetUse {
    const counters = this.view.counters;
    const own: BudgetUse = {
      turns: counters.turns,
      tool_calls: counters.tool_calls,
      tokens: this.view.usage,
      cost_usd: this.view.usage?.cost_usd ?? null,
    };
    if (!this.state.tree_budgets) return own;
    const spent = this.view.tasks_spent!;
    const holding = held ? this.tasks.held() : { turns: 0, tool_calls: 0, cost_usd: 0 };
    return {
      ...own,
      turns: own.turns + spent.turns + holding.turns,
      tool_calls: own.tool_calls + spent.tool_calls + holding.tool_calls,
      cost_usd: (own.cost_usd ?? 0) + (spent.usage?.cost_usd ?? 0) + holding.cost_usd,
    };
  }

  /**
   * The budget that stops the run before its next decision, or null. When only what running tasks
   * hold stands in the way, the run first waits for them to end and give back what they did not use.
   */
  private async limit(): Promise<BudgetStop | null> {
    for (;;) {
      const limit = budgetStop(this.budgets, this.used(), this.msLeft());
      if (limit === null || !this.state.tree_budgets || !this.tasks.active()) return limit;
      if (budgetStop(this.budgets, this.used(false), this.msLeft()) !== null) return limit;
      this.trace.add('budget_wait', { budget: limit, held: this.tasks.held() });
      await this.tasks.nextEnd();
    }
  }

  /**
   * An orchestrating run that ends stops its tasks still running and waits a while for their
   * outcomes, so what they spent joins its tree (its close policy would cancel them unseen).
   */
  private async endTasks(reason: string): Promise<void> {
    if (!this.state.tree_budgets || this.hostLost || !this.tasks.active()) return;
    await wf.CancellationScope.nonCancellable(() =>
      this.tasks.stopAll(`the orchestrating run ended (${reason || 'completed'})`, TASKS_END_WAIT_MS),
    );
  }

  // ---- small helpers ----

  /** Where the run stands now: replay cursor, workspace digest, transcript (see TurnState). */
  private turnState(): TurnState {
    const { head, append } = this.state.transcript;
    return {
      cursor: this.state.cursor,
      workspace_digest: this.state.workspace_digest ?? null,
      transcript: { head, pending: append.length },
    };
  }

  private pinTo(queue: string | null): void {
    this.state.host_queue = queue;
    this.act = hostActivities(queue, this.input.host_lost_s);
  }

  /** A read-only step: the local activity's answer, or the run's host's when it ran elsewhere. */
  private async readOnly<T extends object>(here: () => Promise<T | Elsewhere>, onHost: () => Promise<T>): Promise<T> {
    if (++this.localActivities > LOCAL_ACTIVITIES_PER_TASK) {
      this.localActivities = 1;
      await this.storeTrace();
    }
    const answer = await this.chains.run(here);
    this.ranLocally = !isElsewhere(answer);
    return isElsewhere(answer) ? onHost() : answer;
  }

  /** Runs a host activity outside the deadline scope; null when the host is gone. */
  private async onHost<T>(fn: () => Promise<T>): Promise<T | null> {
    try {
      return await fn();
    } catch (err) {
      if (!this.noteHostLost(err)) throw err;
      return null;
    }
  }

  /** True (and remembered) when `err` says the run's host is gone. */
  private noteHostLost(err: unknown): boolean {
    const lost = isHostLost(err);
    if (lost) this.hostLost = true;
    return lost;
  }

  private hostLostDetail(): string {
    return `no worker of ${this.state.host_queue ?? 'the shared queue'} took the run's next task within ${this.input.host_lost_s ?? DEFAULT_HOST_LOST_S} s: the host that holds the workspace is gone`;
  }

  private setStatus(status: RunStatus): void {
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
  private resumeDeadline(): void {
    if (this.state.waiting_since === null) return;
    this.state.deadline_at += this.now() - this.state.waiting_since;
    this.state.waiting_since = null;
  }

  /** Temporal suggests a new segment, and no task runs (its outcome would be lost with this segment). */
  private mayContinueAsNew(): boolean {
    return this.chains.figures().continueAsNewSuggested && !this.tasks.active();
  }

  /** The run path's clock: as of the open chain's start while one is open (workflows/local-chain.ts). */
  private now(): number {
    return this.chains.now();
  }

  private msLeft(): number {
    return this.state.deadline_at - this.now();
  }
}

/**
 * The end of a run whose step failed for good: a non-retryable failure (or retries exhausted)
 * with its type's reason, a step that timed out on each attempt (a worker that died or hung each
 * time) as `infrastructure_error`; null for anything else. `always`: the loop's own steps, which
 * ended runs with a non-retryable failure's reason before the patch (the first step, `loadRun`,
 * failed its workflow then).
 */
function failedStep(err: unknown, always: boolean, changes: Changes): RunStop | null {
  if (!(err instanceof wf.ActivityFailure)) return null;
  if (err.cause instanceof ApplicationFailure && (always || changes.has(LEGACY_CHANGES.endsWithRecord)))
    return new RunStop('failed', activityFailureReason(err.cause.type), err.cause.message);
  if (err.cause instanceof wf.TimeoutFailure && changes.has(LEGACY_CHANGES.endsWithRecord))
    return new RunStop('failed', 'infrastructure_error', timeoutDetail(err.activityType, err.cause.timeoutType));
  return null;
}

function summarize(call: CallView): string {
  return call.path !== null ? `${call.name} ${call.path}` : call.name;
}

/** A query's request as a client sent it: only whole numbers are taken. */
function cleanRequest(request: unknown): TraceRequest {
  const r = (request ?? {}) as Record<string, unknown>;
  const whole = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? Math.floor(v) : undefined);
  return { after: whole(r.after), limit: whole(r.limit), tail: whole(r.tail) };
}
