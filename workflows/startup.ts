/**
 * agentRun's startup (agentRun.ts calls these in order): the input's own checks and the run's
 * first facts (`begin`), loading (`load`: the fixture or repository, the trust gates, the
 * decision source, the isolation probe), what the loaded run is (`adopt`), and the setup phase
 * (`setup`, SPEC section 11), before the first decision. It touches the run's state and trace
 * only, through `StartupRun`; the workspace's preparation, between `adopt` and `setup`, is the
 * run's own (agentRun.ts `execute`).
 */
import * as wf from '@temporalio/workflow';
import { effectiveBudgets } from '../core/budgets';
import type { ParsedRunInput } from '../core/contracts';
import { isolationRefusal } from '../core/isolation';
import { parseApprover } from '../core/policy';
import { FIXTURE_ATTRIBUTE } from '../core/search-attributes';
import { Trace } from '../core/trace';
import type { LoadRunResult } from '../core/activities';
import { LEGACY_CHANGES } from './changes';
import { ACTIVITY_OPTIONS, failedStep, noteBuild, Phase, RunStop, type RunBase } from './run-base';

export type Loaded = Extract<LoadRunResult, { ok: true }>;

/** What the startup needs of the run beyond `RunBase`. */
export interface StartupRun extends RunBase {
  /** A reopened task goes on with its earlier run's trace numbering. */
  trace: Trace;
  /** Every later activity goes to this host's queue (null: the shared queue). */
  pinTo(queue: string | null): void;
  /** Runs a host activity; null when the host is gone. */
  onHost<T>(fn: () => Promise<T>): Promise<T | null>;
  hostLostDetail(): string;
}

export class Startup extends Phase<StartupRun> {
  /** The run's first facts (a reopened task goes on in its own workspace, transcript and trace numbering), and the input's own checks. */
  begin(input: ParsedRunInput): RunStop | null {
    const child = input.child ?? null;
    if (child?.reopen) {
      this.view.run_id = child.reopen.run_id;
      this.run.trace = new Trace({ next_seq: child.reopen.next_seq, unstored: [] });
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
  async load(input: ParsedRunInput): Promise<Loaded | RunStop> {
    let loaded: LoadRunResult;
    try {
      loaded = await this.act.loadRun(input);
    } catch (err) {
      const stop = failedStep(err, false, this.changes);
      if (stop === null) throw err;
      return stop;
    }
    if (!loaded.ok) return new RunStop('failed', loaded.reason, loaded.detail);
    noteBuild(this.view, loaded.build);
    this.run.pinTo(loaded.host_queue ?? null);
    // A repository run: what its base commit said (settings digest, tests, instructions digest).
    if (loaded.repository) this.trace.add('repository_loaded', { ...loaded.repository.facts, image: loaded.image ?? null });
    if (input.backend === 'docker') {
      const image: [string?] = loaded.image !== undefined ? [loaded.image] : [];
      const evidence = await this.run.onHost(() =>
        this.act.checkIsolation.executeWithOptions({ startToCloseTimeout: '3 minutes', summary: 'probe sandbox isolation' }, image),
      );
      if (evidence === null) return new RunStop('failed', 'host_lost', this.run.hostLostDetail());
      this.view.isolation = evidence;
      this.trace.add('isolation_checked', evidence);
      if (!evidence.verified) return new RunStop('failed', 'isolation_unverified', isolationRefusal(evidence));
    }
    if (input.source.kind === 'provider' && !(input.backend === 'docker' && this.view.isolation?.verified))
      return new RunStop('failed', 'isolation_unverified', 'a live model provider runs only on the docker backend with verified isolation');
    return loaded;
  }

  /** What the loaded run is: its source, sub-runs, budgets, deadline and the reference every later activity gets. */
  adopt(input: ParsedRunInput, loaded: Loaded): void {
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
    this.state.deadline_at = this.run.now() + this.budgets.deadline_s * 1000;
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
    this.run.setStatus('running');
  }

  /**
   * The setup phase (SPEC section 11), before the first decision: the setup's commands run in the
   * run's container behind the egress proxy (or an earlier run's image with the same inputs is
   * used), its products join the workspace's baseline, and from then on the run's image is the
   * setup image, probed again with no network. Null when the run goes on.
   */
  async setup(): Promise<RunStop | null> {
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
}
