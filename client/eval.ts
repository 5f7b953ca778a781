/**
 * The command line's side of a batch: the plan, a resume (which runs to start again), the live
 * progress line, and the report files, assembled from the runs' own results (each run's full
 * record is its child workflow's result, found by its key).
 */
import { abnormalEnd } from '../core/reasons';
import { existsSync, mkdirSync, readdirSync } from 'node:fs';
import { buildId } from '../host/build';
import { writeFileAtomic } from '../host/files';
import { cpus } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { WorkflowNotFoundError, type Client, type WorkflowHandle } from '@temporalio/client';
import {
  entryName,
  LIVE_REPLAY,
  plannedRun,
  planSize,
  runWorkflowId,
  type EvalInput,
  type EvalPlan,
  type EvalProgress,
  type EvalResult,
  type PlannedEntry,
} from '../core/batch-plan';
import { localCredentialsFile } from './repository-run';
import { readTasksFile } from './tasks-file';
import { repositoryRead } from '../core/repo-settings';
import { planInstances, type Prediction } from './swe-bench';
import type { Session } from './session';
import { buildReport, reportJson, reportMarkdown, type EvalReport, type EvalRun } from './report/report';
import { reportHtml, type HtmlRunExtra } from './report/report-html';
import type { RunRecord, TestCase, VerifierFindings } from '../core/contracts';
import { openStore, type Store } from '../store/store';
import { replayTrusted, type Settings } from '../host/settings';
import { evalProgress, evalResult, runOutcome, startInput } from './run-access';
import type { RunOutcome } from '../core/run-view';

/** Outcomes of the harness's environment, not of the agent: a resume starts these runs again. */
export function isInfrastructureOutcome(outcome: RunOutcome): boolean {
  const reason = outcome.record.reason;
  if (reason === 'infrastructure_error' || reason === 'host_lost') return true;
  return (
    reason === 'isolation_unverified' &&
    (outcome.state.detail === 'runtime_unavailable' || outcome.state.isolation?.reason_detail === 'runtime_unavailable')
  );
}

/** Each argument is a fixture folder (with fixture.json) or a folder of fixture folders. */
export function findFixtures(dirs: string[]): string[] {
  const found = new Set<string>();
  for (const dir of dirs.map((d) => resolve(d))) {
    if (!existsSync(dir)) throw new Error(`no such folder: ${dir}`);
    if (existsSync(join(dir, 'fixture.json'))) found.add(dir);
    else for (const name of readdirSync(dir).sort()) if (existsSync(join(dir, name, 'fixture.json'))) found.add(join(dir, name));
  }
  return [...found].sort();
}

export function replaysOf(fixture: string): string[] {
  const dir = join(fixture, 'replays');
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .sort()
    .map((f) => join(dir, f));
}

export interface PlanOptions {
  epochs: number;
  backend: 'local' | 'docker';
  approver: string;
  trustReplay: boolean;
  /** The user trusts the repositories of the batch's tasks (`--trust-repository`): their tests may run on the local backend. */
  trustRepository?: boolean;
  hostLostS?: number;
  /** A live batch: each entry once per epoch, decided by this endpoint and model (and prompt version). */
  live?: EvalPlan['live'];
  /** The user lets the runs change their test configuration. */
  allowTestConfig?: boolean;
  /**
   * SWE-bench instances (client/swe-bench.ts): the instance file, the folder of local repositories,
   * what decides (`gold`, a predictions file, or the live model), and where their verdict files and
   * replays are written.
   */
  instances?: { file: string; repos: string; decisions: 'gold' | { predictions: string } | 'live'; dir: string };
}

/**
 * The plan of fixture folders (or folders of them) and JSONL files of tasks on repositories.
 * Entries without replays are left out (a task's are named in its line). Records are keyed by
 * a task's id where a fixture uses its folder name.
 */
export async function buildPlan(settings: Settings, args: string[], o: PlanOptions): Promise<EvalPlan> {
  const trusted = (path: string) => replayTrusted(settings, path, o.trustReplay);
  const taskFiles = args.filter((a) => a.endsWith('.jsonl'));
  const dirs = args.filter((a) => !a.endsWith('.jsonl'));
  const read = repositoryRead(o.backend, o.trustRepository);
  const tasks: PlannedEntry[] = [];
  const reading = { settings, read, credentialsFile: localCredentialsFile(settings) };
  const planned = [];
  for (const file of taskFiles) planned.push(...(await readTasksFile(resolve(file), reading)));
  if (o.instances) planned.push(...(await instanceTasks(o.instances, reading)));
  for (const t of planned)
    tasks.push({
      dir: t.repo.path,
      repo: o.trustRepository ? { ...t.repo, trusted: true } : t.repo,
      replays: t.replays.map((r) => ({ ...r, trusted: trusted(r.path) })),
    });
  const fixtures: PlannedEntry[] = [
    ...findFixtures(dirs).map((dir) => ({
      dir,
      replays: replaysOf(dir).map((path) => ({ path, name: basename(path, '.json'), trusted: trusted(path) })),
    })),
    ...tasks,
  ]
    .map((f) => (o.live ? { ...f, replays: [{ path: '', name: LIVE_REPLAY, trusted: false }] } : f))
    .filter((f) => f.replays.length > 0);
  return {
    fixtures,
    epochs: o.epochs,
    backend: o.backend,
    approver: o.approver,
    ...(o.hostLostS ? { host_lost_s: o.hostLostS } : {}),
    ...(o.allowTestConfig ? { allow_test_config_change: true } : {}),
    ...(o.live ? { live: o.live } : {}),
  };
}

function instanceTasks(i: NonNullable<PlanOptions['instances']>, reading: Parameters<typeof planInstances>[4]) {
  const decisions =
    i.decisions === 'gold'
      ? ({ kind: 'gold' } as const)
      : i.decisions === 'live'
        ? ({ kind: 'live' } as const)
        : ({ kind: 'predictions', file: i.decisions.predictions } as const);
  return planInstances(i.file, i.repos, i.dir, decisions, reading);
}

/**
 * SWE-bench's predictions of a batch's repository runs (its first epoch): each run's change as
 * its verifier saw it (completed or not; '' when it ended before verification), named by the
 * replay (`gold`, a prediction's model) or the live model. A run whose change is not on this
 * machine is left out, and said so on stderr.
 */
export async function batchPredictions(session: Session, plan: EvalPlan, collected: Collected): Promise<Prediction[]> {
  const { verifiedPatch, NoBranch } = await import('./branch');
  const tasks = new Set(plan.fixtures.filter((f) => f.repo).map((f) => entryName(f)));
  const rows: Prediction[] = [];
  for (const [i, run] of collected.report.runs.entries()) {
    if (run.epoch !== 1 || !tasks.has(run.fixture)) continue;
    const workflowId = collected.extras[i].workflow_id;
    try {
      const model_patch = await verifiedPatch(session, workflowId);
      rows.push({ instance_id: run.fixture, model_name_or_path: plan.live?.model ?? run.replay ?? 'unknown', model_patch });
    } catch (err) {
      if (!(err instanceof NoBranch)) throw err;
      process.stderr.write(`predictions: ${run.fixture} (${workflowId}) left out: ${err.message}\n`);
    }
  }
  return rows;
}

/** The input a batch was started with, read from its history (its latest run carries the same input). */
export async function batchInput(client: Client, batch: string): Promise<EvalInput | null> {
  return startInput<EvalInput>(client.workflow.getHandle(batch));
}

type Attempt =
  | { kind: 'done'; outcome: RunOutcome; workflowId: string; startedAt: Date; closedAt: Date | null }
  | { kind: 'running'; handle: WorkflowHandle; workflowId: string }
  | { kind: 'abnormal'; status: string; workflowId: string };

const MAX_ATTEMPTS = 9;
/** How long the report waits for a run still going after its batch ended. */
const RUN_WAIT_MS = 60_000;

/** Every attempt of one run, in order, as Temporal holds them. */
async function attemptsOf(client: Client, batch: string, plan: EvalPlan, index: number, wait: boolean): Promise<Attempt[]> {
  const run = plannedRun(plan, index);
  const attempts: Attempt[] = [];
  for (let n = 1; n <= MAX_ATTEMPTS; n++) {
    const workflowId = runWorkflowId(batch, plan, run, n);
    const handle = client.workflow.getHandle(workflowId);
    let described;
    try {
      described = await handle.describe();
    } catch (err) {
      if (err instanceof WorkflowNotFoundError) break;
      throw err;
    }
    let status = described.status.name;
    if (status === 'RUNNING' && wait) {
      // The batch has ended, so its runs have too, unless one was left running on its own: it is
      // waited for a while, then reported as running.
      await runOutcome(handle, RUN_WAIT_MS).catch(() => undefined);
      described = await handle.describe();
      status = described.status.name;
    }
    if (status === 'RUNNING') attempts.push({ kind: 'running', handle, workflowId });
    else if (status === 'COMPLETED')
      attempts.push({
        kind: 'done',
        outcome: await runOutcome(handle),
        workflowId,
        startedAt: described.startTime,
        closedAt: described.closeTime ?? null,
      });
    else attempts.push({ kind: 'abnormal', status, workflowId });
  }
  return attempts;
}

async function pool<T, R>(items: T[], width: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(width, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        results[i] = await fn(items[i]);
      }
    }),
  );
  return results;
}

/**
 * What a resume starts, per run: missing runs and runs whose last attempt ended on
 * infrastructure get their next attempt; everything else (agent and verifier outcomes, runs
 * still going) is kept.
 */
export async function resumeAttempts(
  client: Client,
  batch: string,
  plan: EvalPlan,
): Promise<{ attempts: string; retry: number; missing: number; kept: number }> {
  const all = await pool(
    Array.from({ length: planSize(plan) }, (_, i) => i),
    16,
    (i) => attemptsOf(client, batch, plan, i, false),
  );
  let retry = 0;
  let missing = 0;
  const attempts = all.map((as) => {
    const last = as.at(-1);
    if (last === undefined) {
      missing++;
      return '1';
    }
    const again = last.kind === 'abnormal' || (last.kind === 'done' && isInfrastructureOutcome(last.outcome));
    if (!again || as.length >= MAX_ATTEMPTS) return '0';
    retry++;
    return String(as.length + 1);
  });
  return { attempts: attempts.join(''), retry, missing, kept: attempts.length - retry - missing };
}

function recordOf(a: Attempt, plan: EvalPlan, index: number): RunRecord {
  if (a.kind === 'done') return a.outcome.record;
  const run = plannedRun(plan, index);
  const fixture = plan.fixtures[run.fixture];
  return {
    fixture: entryName(fixture),
    replay: plan.live ? null : fixture.replays[run.replay].name,
    status: 'failed',
    reason: a.kind === 'abnormal' ? abnormalEnd(a.status) : 'running',
    writes: 0,
    receipts: 0,
    red_observed: false,
    diff_paths: [],
    candidate_tests: null,
    acceptance: null,
    tool_errors: {},
    turns: 0,
    tool_calls: 0,
    repeated_calls: 0,
    empty_replies: 0,
    unreceipted_changes: 0,
    trace_id: null,
  };
}

export interface Collected {
  report: EvalReport;
  extras: HtmlRunExtra[];
  durations: Record<string, number | null>;
  /** The builds that ran each run, by workflow id (timings.json: they differ across builds, report.json must not). */
  builds?: Record<string, string[] | null | undefined>;
  /** Each run's OpenTelemetry trace id by workflow id (null where its worker exported none). */
  traceIds: Record<string, string | null>;
}

export const traceLine = (e: { seq: number; type: string; call_id?: string; data: unknown }) => {
  const data = JSON.stringify(e.data ?? null);
  return `${e.seq} ${e.type}${e.call_id ? ` ${e.call_id}` : ''} ${data.length > 160 ? `${data.slice(0, 157)}...` : data}`;
};

/** The report of a finished batch: each run's last attempt, with its first outcome kept when it was retried. */
export async function collectReport(
  client: Client,
  settings: Settings,
  batch: string,
  plan: EvalPlan,
  webUi: string | null,
): Promise<Collected> {
  const all = await pool(
    Array.from({ length: planSize(plan) }, (_, i) => i),
    16,
    (i) => attemptsOf(client, batch, plan, i, true),
  );
  const store = openStore(settings.stateDir);
  try {
    const rows = all.map((as, index) => {
      const last =
        as.at(-1) ??
        ({ kind: 'abnormal', status: 'MISSING', workflowId: runWorkflowId(batch, plan, plannedRun(plan, index), 1) } as Attempt);
      const record = recordOf(last, plan, index);
      const first = as.length > 1 ? recordOf(as[0], plan, index) : null;
      const run: EvalRun = {
        ...record,
        epoch: plannedRun(plan, index).epoch,
        ...(first ? { retried: { attempts: as.length, first: { status: first.status, reason: first.reason } } } : {}),
      };
      const duration =
        last.kind === 'done' && last.closedAt ? Math.round((last.closedAt.getTime() - last.startedAt.getTime()) / 100) / 10 : null;
      const events = last.kind === 'done' && store ? store.trace(last.outcome.state.run_id) : [];
      const extra: HtmlRunExtra = {
        duration_s: duration,
        workflow_id: last.workflowId,
        web_ui: webUi
          ? `${webUi}/namespaces/${encodeURIComponent(client.options.namespace)}/workflows/${encodeURIComponent(last.workflowId)}`
          : null,
        trace: events.length > 0 ? events.map(traceLine) : null,
        // A run's state from before builds were recorded has none.
        builds: last.kind === 'done' ? (last.outcome.state.builds ?? null) : null,
        trace_id: record.trace_id ?? null,
        tests: last.kind === 'done' && store ? verifiedTests(store, last.outcome.state.verification) : null,
      };
      return { run, extra };
    });
    // The report's order (fixture, replay, epoch) for the extras too.
    const report = buildReport(rows.map((r) => r.run));
    const order = new Map(rows.map((r) => [r.run, r.extra]));
    const extras = report.runs.map((r) => order.get(r)!);
    const durations = Object.fromEntries(extras.map((e) => [e.workflow_id, e.duration_s]));
    const builds = Object.fromEntries(extras.map((e) => [e.workflow_id, e.builds]));
    const traceIds = Object.fromEntries(extras.map((e) => [e.workflow_id, e.trace_id]));
    return { report, extras, durations, builds, traceIds };
  } finally {
    store?.close();
  }
}

/** Every test of a verification with its outcome at the base and at the end, and its acceptance cases, from this host's store (null: not here). */
export function verifiedTests(store: Store, v: VerifierFindings | null): HtmlRunExtra['tests'] {
  const listed = (ref: string | null | undefined) => (ref && store.has(ref) ? store.get<TestCase[]>(ref) : null);
  const end = listed(v?.candidate_tests.tests_ref);
  if (end === null) return null;
  const base = new Map((listed(v?.verdict?.base?.tests_ref) ?? []).map((t) => [t.id, t.outcome]));
  const tests = end.map((t) => ({ id: t.id, base: base.get(t.id) ?? null, end: t.outcome as string | null }));
  const seen = new Set(end.map((t) => t.id));
  for (const [id, outcome] of base) if (!seen.has(id)) tests.push({ id, base: outcome, end: null });
  // The hidden acceptance cases, each with its outcome (they have no base).
  for (const c of listed(v?.acceptance?.tests_ref) ?? []) tests.push({ id: `acceptance: ${c.id}`, base: null, end: c.outcome });
  return tests;
}

/** The report files, each written whole (temporary file, fsync, rename): a reader never sees half of one. */
export function writeOutputs(outDir: string, collected: Collected, timing: Record<string, unknown>): void {
  mkdirSync(outDir, { recursive: true });
  writeFileAtomic(join(outDir, 'report.json'), reportJson(collected.report));
  writeFileAtomic(join(outDir, 'report.md'), reportMarkdown(collected.report));
  writeFileAtomic(join(outDir, 'report.html'), reportHtml(collected.report, collected.extras, buildId()));
  writeFileAtomic(
    join(outDir, 'timings.json'),
    `${JSON.stringify({ ...timing, build: buildId(), node: process.version, platform: `${process.platform}-${process.arch}`, cpus: cpus().length, run_durations_s: collected.durations, run_builds: collected.builds ?? {}, run_trace_ids: collected.traceIds }, null, 2)}\n`,
  );
}

// ---- progress ----

const clock = (s: number | null) =>
  s === null
    ? '?'
    : s >= 3600
      ? `${Math.floor(s / 3600)}h${Math.floor((s % 3600) / 60)}m`
      : s >= 60
        ? `${Math.floor(s / 60)}m${s % 60}s`
        : `${s}s`;

export function progressLine(batch: string, p: EvalProgress): string {
  const width = 24;
  const filled = p.total > 0 ? Math.round((width * p.done) / p.total) : 0;
  return `${batch} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${p.done}/${p.total} done, ${p.completed} completed, ${p.running} running, ETA ${clock(p.eta_s)}`;
}

/**
 * Shows the batch's progress (its `progress` Query) until it ends: one line rewritten in place
 * on a terminal, plain lines when `stream` is not one (at most one per 5 s, and when it ends).
 */
export async function followBatch(handle: WorkflowHandle, stream: NodeJS.WriteStream): Promise<EvalResult> {
  const tty = stream.isTTY === true;
  let lastLine = '';
  let lastAt = 0;
  let finished = false;
  const result = evalResult(handle).finally(() => (finished = true));
  const show = (p: EvalProgress, force = false) => {
    const line = progressLine(handle.workflowId, p);
    if (tty) stream.write(`\r\x1b[K${line}`);
    else if (force || (line !== lastLine && performance.now() - lastAt > 5000)) {
      stream.write(`${line}\n`);
      lastAt = performance.now();
    }
    lastLine = line;
  };
  while (!finished) {
    try {
      show(await evalProgress(handle));
    } catch {
      // Between segments (continue-as-new) or while no worker answers: try again.
    }
    await Promise.race([result.catch(() => undefined), new Promise((r) => setTimeout(r, 1000))]);
  }
  const end = await result;
  show(end.progress, true);
  if (tty) stream.write('\n');
  return end;
}

export { planSize };
