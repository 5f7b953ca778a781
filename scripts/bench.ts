/**
 * `npm run bench`: the harness's speed and memory figures, measured side by side in one run on
 * a real Temporal dev server, printed as one table (median and spread over repeats) with the
 * machine's facts, and written to bench/results.json. Targets are stated beside each figure;
 * nothing here asserts: a figure that misses its target is printed with how far it is off, and
 * why, from the figures measured beside it.
 *
 * Its sizes and sections come from the `BENCH_*` variables of `VARIABLES` (name, default and
 * meaning of each), read once at the start of `main`. Each section starts what it needs (a dev
 * server and a worker: `onWorker`; a tree of numbered files: `numberedFiles`), and each group of
 * figures is one function.
 */
import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { promisify } from 'node:util';
import { cpSync, lstatSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, freemem, loadavg, totalmem } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { historyToJSON } from '@temporalio/common/lib/proto-utils';
import type { WorkflowHandle } from '@temporalio/client';
import type { temporal } from '@temporalio/proto';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { RACY_MARGIN_MS } from '../workspace/manifest';
import { withUndo } from '../workspace/undo';
import { loadRepository, prepareRepositoryWorkspace } from '../workspace/repository';
import { runPaths } from '../workspace/workspace';
import { repositoryReaders } from '../client/repository-run';
import type { RepositoryRead } from '../sandbox/git-sandbox';
import { offThread } from '../workspace/thread';
import { sha256 } from '../host/digest';
import { preparePatch, writePatch } from '../tools/apply_patch';
import { readFile } from '../tools/read_file';
import { workspaceDigest } from '../workspace/workspace';
import { temporalBinary } from '../host/temporal-bin';
import { JUNIT_PLACEHOLDER, type RunInput, type TestsSpec } from '../core/contracts';
import { runTestsIn } from '../sandbox/test-runner';
import { DEFAULT_MAX_BUDGETS } from '../core/budgets';
import { plannedRun, planSize, runWorkflowId, type EvalPlan } from '../core/batch-plan';
import { LINKCHECK, PROJECT_ROOT, prepareRun, tempDir, writeFiles, SETTINGS } from './support/run-dir';
import { canonicalInput, killed, spawnWorker, startServer, uniqueQueue, writeReplay } from './support/temporal';
import { manyPathsCommit } from './support/git';
import { OtlpReceiver } from './support/otlp-receiver';
import { CLUSTER_BIN, clusterBuilt, environmentOf, startBackend, type ServerKind, type ServerUnderTest } from './support/servers';
import { type Settings } from '../host/settings';
import { createWorker, quietLogger, type WorkerOptions } from '../worker';
import { WORKER_NODE_ARGS, workerProcessEnv } from '../host/worker-launch';
import { bundleWorkflowCode } from '@temporalio/worker';
import type { RunOutcome } from '../core/run-view';
import {
  queryState,
  queryTrace,
  runOutcome,
  approvalFor,
  sendApproval,
  sendSteer,
  startRun,
  evalResult,
  startEval,
} from '../client/run-access';
import { startConsole, type RunningConsole } from '../client/console/server';
import { runFrames, type ConsoleLink } from '../client/event-stream';
import type { Frame } from '../core/delivery';

const SECTIONS = ['steps', 'parked', 'baseline', 'manifest', 'cli', 'undo', 'import', 'setup', 'stream', 'hint', 'servers'] as const;
type Section = (typeof SECTIONS)[number];

/** What the bench measures and how much: one field per row of `VARIABLES`. */
interface BenchOptions {
  /** Repeats of each timed figure. */
  repeats: number;
  /** Runs parked on an approval at once. */
  parked: number;
  /** Files of the workspace whose unchanged manifest is checked. */
  files: number;
  /** Files of the workspace a test process's changes are undone in. */
  undoFiles: number;
  /** Files of the repository imported through the reading container and through this machine's git. */
  importFiles: number;
  /** False: the setup-phase section is skipped. */
  setup: boolean;
  /** The sections to run; null: all of them. */
  only: Set<string> | null;
  /** Which parked workers run: without traces (false), exporting them (true), or both in that order. */
  parkedTraces: boolean[];
}

interface Variable<T> {
  name: string;
  default: string;
  meaning: string;
  /** The value given (undefined when unset) to the typed field. */
  read: (value: string | undefined) => T;
}

const count = (name: string, fallback: number, meaning: string): Variable<number> => ({
  name,
  default: String(fallback),
  meaning,
  read: (value) => Number(value ?? fallback),
});

/** Every variable the bench reads: its name, default and meaning, and the option it sets. */
const VARIABLES: { readonly [K in keyof BenchOptions]: Variable<BenchOptions[K]> } = {
  repeats: count('BENCH_REPEATS', 5, 'repeats of each timed figure'),
  parked: count('BENCH_PARKED', 1000, 'runs parked on an approval at once, by a worker process without traces and by one exporting them'),
  files: count('BENCH_FILES', 100_000, 'files of the workspace whose unchanged manifest is checked'),
  undoFiles: count('BENCH_UNDO_FILES', 30_000, "files of the workspace a test process's changes are undone in"),
  importFiles: count(
    'BENCH_IMPORT_FILES',
    30_000,
    "files of the repository imported through the reading container and through this machine's git",
  ),
  setup: {
    name: 'BENCH_SETUP',
    default: '1',
    meaning: '0 skips the setup-phase section (it needs the engine and its images)',
    read: (value) => value !== '0',
  },
  only: {
    name: 'BENCH_ONLY',
    default: 'all',
    meaning: `comma-separated sections to run (${SECTIONS.join(', ')}), written to bench/results.<sections>.json; all: bench/results.json`,
    read: (value) => (value ? new Set(value.split(',').map((s) => s.trim())) : null),
  },
  parkedTraces: {
    name: 'BENCH_PARKED_TRACES',
    default: 'both',
    meaning: 'which parked workers run, the harness and its floor alike: without (traces), with (traces exported) or both',
    read: (value) => {
      const choices: Record<string, boolean[]> = { both: [false, true], without: [false], with: [true] };
      const chosen = choices[value ?? 'both'];
      if (!chosen) throw new Error(`BENCH_PARKED_TRACES must be both, without or with, not ${JSON.stringify(value)}`);
      return chosen;
    },
  },
};

function readOptions(env: NodeJS.ProcessEnv = process.env): BenchOptions {
  const out: Partial<Record<keyof BenchOptions, unknown>> = {};
  for (const [field, variable] of Object.entries(VARIABLES) as [keyof BenchOptions, Variable<unknown>][])
    out[field] = variable.read(env[variable.name]);
  return out as BenchOptions;
}

/** Whether a section of the bench runs (BENCH_ONLY). */
const runs = (o: BenchOptions, name: Section) => o.only === null || o.only.has(name);

/**
 * Read-only steps of a long run against a short one: enough that the machine's noise in two
 * runs' CPU time is small against the steps' own (at 40 a round's ratio to the floor moved by ±0.5).
 */
const READS = 160;

async function main(): Promise<void> {
  const o = readOptions();
  const settings = SETTINGS;
  const loadAtStart = +loadavg()[0].toFixed(2);
  if (runs(o, 'steps')) await benchSteps(o, settings);
  if (runs(o, 'parked')) await benchParked(o);
  if (runs(o, 'baseline')) await benchBaseline(o, settings);
  if (runs(o, 'manifest')) await benchManifest(o);
  if (runs(o, 'cli')) benchCli(o);
  if (runs(o, 'undo')) await benchUndo(o);
  if (runs(o, 'import')) await benchImport(o, settings);
  if (runs(o, 'setup')) await benchSetupCache(o, settings);
  if (runs(o, 'stream')) await benchStream(o, settings);
  if (runs(o, 'hint')) await benchHint();
  if (runs(o, 'servers')) await benchServers(o, settings);
  report(o, settings, loadAtStart);
}

/** A target on a figure's median: at most (`<=`) or under (`<`) the limit, in the figure's unit. */
interface Target {
  op: '<=' | '<';
  limit: number;
  /** Why a miss happens, from the figures measured beside it (printed only when it is missed). */
  why?: () => string;
}

interface Figure {
  name: string;
  unit: string;
  values: number[];
  median: number;
  min: number;
  max: number;
  target: string;
  met: boolean | null;
  /** When missed: by how much (in the figure's unit), and why. */
  missed_by?: number;
  why?: string;
}

const figures: Figure[] = [];
const targets = new Map<Figure, Target>();
function figure(name: string, unit: string, values: number[], target?: Target): Figure {
  const sorted = [...values].sort((a, b) => a - b);
  const median = medianOf(values);
  const met = target ? (target.op === '<=' ? median <= target.limit : median < target.limit) : null;
  const f: Figure = {
    name,
    unit,
    values,
    median,
    min: sorted[0],
    max: sorted.at(-1)!,
    target: target ? `${target.op} ${target.limit}${unit === '%' ? ' %' : unit === 'x' ? 'x' : ` ${unit}`}` : '',
    met,
  };
  if (target) targets.set(f, target);
  if (met === false) f.missed_by = median - target!.limit;
  figures.push(f);
  process.stderr.write(`  ${name}: ${fmt(median)} ${unit}\n`);
  return f;
}

function medianOf(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted.length % 2 ? sorted[(sorted.length - 1) / 2] : (sorted[sorted.length / 2 - 1] + sorted[sorted.length / 2]) / 2;
}

/** Milliseconds `fn` takes. */
function msOf(fn: () => void): number {
  const t = performance.now();
  fn();
  return performance.now() - t;
}

/** What `fn` returns and the milliseconds it takes. */
async function timed<T>(fn: () => Promise<T>): Promise<{ value: T; ms: number }> {
  const t = performance.now();
  const value = await fn();
  return { value, ms: performance.now() - t };
}

/** CPU time of this whole process (every thread: JavaScript, workflow thread, SDK core) while `fn` runs. */
async function cpuMs<T>(fn: () => Promise<T>): Promise<{ value: T; cpu: number }> {
  const before = process.cpuUsage();
  const value = await fn();
  const used = process.cpuUsage(before);
  return { value, cpu: (used.user + used.system) / 1000 };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Waits until files written at `written` (ms since the epoch) are older than RACY_MARGIN_MS: the
 * manifest digests younger files again by design, so a check of an unchanged tree would not be one.
 */
const pastRacyMargin = (written: number) => sleep(Math.max(0, written + RACY_MARGIN_MS + 100 - Date.now()));

/** `n` small files in folders of 100: `d<i/100>/f<i%100>.txt`. */
function numberedFiles(n: number): Record<string, string> {
  const files: Record<string, string> = {};
  for (let i = 0; i < n; i++) files[`d${Math.floor(i / 100)}/f${i % 100}.txt`] = `file ${i}\n`;
  return files;
}

/** The verdict column: met, or missed by how much. */
const verdict = (f: Figure) =>
  f.met === null ? '–' : f.met ? 'met' : `missed by ${fmt(f.missed_by!)} ${f.unit} (${fmt(f.median / targets.get(f)!.limit)}x the target)`;

const fmt = (n: number) => (Math.abs(n) >= 100 ? n.toFixed(0) : Math.abs(n) >= 10 ? n.toFixed(1) : n.toFixed(2));

/** The table of figures, each missed target with why, and the machine; written to bench/results(.<sections>).json. */
function report(o: BenchOptions, settings: Settings, loadAtStart: number): void {
  const machine = {
    cores: cpus().length,
    cpu: cpus()[0]?.model ?? 'unknown',
    memory_gib: +(totalmem() / 2 ** 30).toFixed(1),
    free_gib: +(freemem() / 2 ** 30).toFixed(1),
    node: process.version,
    temporal: execFileSync(temporalBinary(settings), ['--version'], { encoding: 'utf8' }).trim(),
    repeats: o.repeats,
    parked: o.parked,
    files: o.files,
    undo_files: o.undoFiles,
    // The machine may be shared: its load when the run started and ended.
    load_average: { start: loadAtStart, end: +loadavg()[0].toFixed(2) },
  };
  for (const f of figures) if (f.met === false) f.why = targets.get(f)!.why?.();
  const rows = figures.map(
    (f) =>
      `| ${f.name} | ${fmt(f.median)} ${f.unit} | ${fmt(f.min)}–${fmt(f.max)} | ${f.values.length} | ${f.target || '–'} | ${verdict(f)} |`,
  );
  const table = ['| figure | median | spread (min–max) | n | target | |', '|---|---|---|---|---|---|', ...rows].join('\n');
  console.log(table);
  for (const f of figures.filter((x) => x.met === false && x.why)) console.log(`\n${f.name}: ${verdict(f)}. Why: ${f.why}.`);
  console.log(
    `\nmachine: ${machine.cores} cores (${machine.cpu}), ${machine.memory_gib} GiB, Node ${machine.node}, ${machine.temporal}, load average ${machine.load_average.start} at the start, ${machine.load_average.end} at the end`,
  );
  // A partial run (BENCH_ONLY) writes a file of its own: the committed results stay one whole run.
  const name = o.only === null ? 'results.json' : `results.${[...o.only].sort().join('+')}.json`;
  mkdirSync(join(PROJECT_ROOT, 'bench'), { recursive: true });
  writeFileSync(join(PROJECT_ROOT, 'bench', name), `${JSON.stringify({ machine, figures }, null, 2)}\n`);
}

/** What a section's runs are started on: a server and a harness worker of its own. */
interface Rig {
  env: TestWorkflowEnvironment;
  /** The worker's task queue (a batch's parent goes there too). */
  taskQueue: string;
  /** Starts a run; its workflow id is `<name>-<n>`. */
  start(input: RunInput): Promise<WorkflowHandle>;
  /** Runs `input` to its end: its milliseconds from the start, its handle and its outcome. */
  finish(input: RunInput): Promise<{ ms: number; handle: WorkflowHandle; outcome: RunOutcome }>;
}

/** Runs `body` on a fresh server (a dev server unless `server` says) and a worker on queue `<name>-...`; stops both after it, however it ends. */
async function onWorker<T>(
  name: string,
  options: Omit<WorkerOptions, 'connection' | 'taskQueue'>,
  body: (rig: Rig) => Promise<T>,
  server: () => Promise<TestWorkflowEnvironment> = startServer,
): Promise<T> {
  const env = await server();
  try {
    const taskQueue = uniqueQueue(name);
    const { worker, close } = await createWorker({ connection: env.nativeConnection, taskQueue, ...options });
    try {
      let n = 0;
      const start = (input: RunInput) => startRun(env.client, input, { taskQueue, workflowId: `${name}-${++n}` });
      const finish = async (input: RunInput) => {
        const run = await timed(async () => {
          const handle = await start(input);
          return { handle, outcome: await runOutcome(handle, null) };
        });
        return { ms: run.ms, ...run.value };
      };
      return await worker.runUntil(() => body({ env, taskQueue, start, finish }));
    } finally {
      close();
    }
  } finally {
    await env.teardown();
  }
}

const read = (i: number) => ({ kind: 'tool', call: { call_id: `read-${i}`, name: 'read_file', arguments: { path: 'src/linkcheck.py' } } });
/** A permanent model error ends a run at once, without verification: the runs below time orchestration only. */
const STOP = { kind: 'model_error', transient: false };

/** The canonical fixture's run on a scripted replay, with room for every decision. */
const replayInput = (decisions: unknown[], overrides: object = {}) =>
  canonicalInput('canonical', {
    source: { kind: 'replay', path: writeReplay(decisions), trusted: true },
    budgets: { max_turns: READS + 10, max_tool_calls: READS + 10 },
    ...overrides,
  });

/** Test and acceptance processes, timed: a run's wall time splits into harness and process time. */
function processClock(): { ms: () => number; wrap: NonNullable<WorkerOptions['wrapBackend']> } {
  let total = 0;
  return {
    ms: () => total,
    wrap: (b) => ({
      name: b.name,
      exec: async (spec) => {
        const t = performance.now();
        try {
          return await b.exec(spec);
        } finally {
          total += performance.now() - t;
        }
      },
    }),
  };
}

/** Orchestration of a read-only step, canonical runs and history sizes. */
async function benchSteps(o: BenchOptions, settings: Settings): Promise<void> {
  const processes = processClock();
  const worker: Omit<WorkerOptions, 'connection' | 'taskQueue'> = {
    stateDir: tempDir('bench-state'),
    docker: false,
    // The benchmark's runs are the canonical fixture's, on this host: it allows local runs, as their operator.
    settings: { ...settings, allowLocal: true },
    wrapBackend: processes.wrap,
  };
  await onWorker('bench', worker, async (rig) => {
    process.stderr.write('orchestration of a read-only step\n');
    await rig.finish(replayInput([STOP])); // warm-up
    const long = replayInput([...Array.from({ length: READS }, (_, i) => read(i)), STOP]);
    const short = replayInput([STOP]);
    await readOnlyStep(rig, o, long, short);
    const canonical = await canonicalRun(rig, o, processes.ms);
    await historySize(rig, canonical, long, short);
  });
}

/** The SDK's own cost of a read-only step, per repeat: no-op local activities in a process of their own (scripts/bench-floor.ts). */
async function sdkFloor(
  address: string,
  repeats: number,
  run?: { activities: number; locals: number; elsewhere: number },
): Promise<FloorFigures> {
  const { stdout } = await promisify(execFile)(process.execPath, [
    join(__dirname, 'bench-floor.js'),
    address,
    String(READS),
    String(repeats),
    ...(run ? [String(run.activities), String(run.locals), String(run.elsewhere)] : []),
  ]);
  return JSON.parse(stdout) as FloorFigures;
}

/** What scripts/bench-floor.ts prints: per step, and per run of the canonical run's Temporal work (with its queues, and all on one). */
interface FloorFigures {
  ms: number[];
  cpu: number[];
  cpuOne: number[];
  run: number[];
  runEager: number[];
}

/**
 * A read-only step through Temporal, a long run against a short one, beside the SDK's floor and the
 * handler alone. Each repeat is a round of both, the harness's then the floor's, so a ratio is
 * taken from figures of the same minute: the machine's load moves both alike.
 */
async function readOnlyStep(rig: Rig, o: BenchOptions, long: RunInput, short: RunInput): Promise<void> {
  const perStep: number[] = [];
  const inProcess: number[] = [];
  const cpuPerStep: number[] = [];
  const floor: FloorFigures = { ms: [], cpu: [], cpuOne: [], run: [], runEager: [] };
  const t = prepareRun({ repo: LINKCHECK + '/repo' });
  for (let r = 0; r < o.repeats; r++) {
    const a = await cpuMs(() => rig.finish(long));
    const b = await cpuMs(() => rig.finish(short));
    // A figure of a run that did not take every step would be wrong: each took its own.
    for (const [run, calls] of [
      [a.value, READS],
      [b.value, 0],
    ] as const) {
      const { status, tool_calls } = run.outcome.record;
      if (tool_calls !== calls) throw new Error(`a timed run made ${tool_calls} tool calls, not ${calls} (${status})`);
    }
    perStep.push((a.value.ms - b.value.ms) / READS);
    cpuPerStep.push((a.cpu - b.cpu) / READS);
    const handlerMs = msOf(() => {
      for (let i = 0; i < READS; i++) readFile(t.ctx, `read-${i}`, { path: 'src/linkcheck.py' });
    });
    inProcess.push(handlerMs / READS);
    const round = await sdkFloor(rig.env.address, 1);
    floor.ms.push(...round.ms);
    floor.cpu.push(...round.cpu);
    floor.cpuOne.push(...round.cpuOne);
  }
  const floorFigure = figure('SDK floor: two no-op local activities per step (another process, same server)', 'ms/step', floor.ms);
  const floorCpu = figure('SDK floor: its worker CPU per step (every thread)', 'ms/step', floor.cpu);
  const oneCpu = figure('SDK floor with one no-op local activity per step: its worker CPU per step', 'ms/step', floor.cpuOne);
  figure('read-only step through Temporal (a replay decision with its read, one local activity)', 'ms/step', perStep);
  figure('the same read_file handler in-process', 'ms/call', inProcess);
  const cpuFigure = figure('worker CPU per read-only step (every thread)', 'ms/step', cpuPerStep);
  figure(
    "worker CPU per read-only step / the SDK floor's (each round's own)",
    'x',
    cpuPerStep.map((v, r) => v / floor.cpu[r]),
    {
      op: '<=',
      limit: 1.25,
      why: () =>
        `the floor's two no-op local activities cost ${fmt(floorCpu.median)} ms of CPU a step and the harness's step ${fmt(cpuFigure.median)} ms, one local activity (a replay's decision with its read) against one no-op local activity's ${fmt(oneCpu.median)} ms; the rest is the harness's own: the workflow code's promises (each one hooked by the SDK), the step's payloads across the worker's threads, one store commit, validation and trace events`,
    },
  );
  figure(
    "worker CPU per read-only step / one no-op local activity's (each round's own)",
    'x',
    cpuPerStep.map((v, r) => v / floor.cpuOne[r]),
  );
  figure(
    'orchestration cost per step (difference)',
    'ms/step',
    perStep.map((v, i) => v - inProcess[i]),
    {
      op: '<=',
      limit: 5,
      why: () =>
        `a replay's read-only step is one local activity (the decision with its read), and one that does nothing already takes ${fmt(oneCpu.median)} ms of CPU on this SDK and machine (two: ${fmt(floorFigure.median)} ms and ${fmt(floorCpu.median)} ms of CPU); the harness's worker spends ${fmt(cpuFigure.median)} ms of CPU (every thread) per step, about the step's own time, so a step is bound by CPU: the SDK's share is the floor's, the harness's the rest (the step's store commit with its WAL sync, its payloads, validation and trace events)`,
    },
  );
}

/** A history event's time on the server's clock, in milliseconds. */
const eventMs = (e: temporal.api.history.v1.IHistoryEvent) => Number(e.eventTime?.seconds ?? 0) * 1000 + (e.eventTime?.nanos ?? 0) / 1e6;

/**
 * Where a run's time went, from its history's event times: activities and workflow tasks, schedule
 * to completion; the activities on another queue than the workflow's (a pinned run's host queue),
 * and the activities' time from schedule to start, summed.
 */
async function historyParts(handle: WorkflowHandle) {
  const events = (await handle.fetchHistory()).events ?? [];
  const at = new Map(events.map((e) => [Number(e.eventId), eventMs(e)]));
  const queue = events[0]?.workflowExecutionStartedEventAttributes?.taskQueue?.name;
  const parts = { activities: 0, elsewhere: 0, activityMs: 0, waitMs: 0, workflowTasks: 0, workflowTaskMs: 0, localActivities: 0 };
  for (const e of events) {
    const id = Number(e.eventId);
    if (e.activityTaskScheduledEventAttributes && e.activityTaskScheduledEventAttributes.taskQueue?.name !== queue) parts.elsewhere++;
    if (e.activityTaskStartedEventAttributes)
      parts.waitMs += at.get(id)! - at.get(Number(e.activityTaskStartedEventAttributes.scheduledEventId))!;
    if (e.activityTaskCompletedEventAttributes) {
      parts.activities++;
      parts.activityMs += at.get(id)! - at.get(Number(e.activityTaskCompletedEventAttributes.scheduledEventId))!;
    }
    if (e.workflowTaskCompletedEventAttributes) {
      parts.workflowTasks++;
      parts.workflowTaskMs += at.get(id)! - at.get(Number(e.workflowTaskCompletedEventAttributes.scheduledEventId))!;
    }
    if (e.markerRecordedEventAttributes?.markerName === 'core_local_activity') parts.localActivities++;
  }
  return parts;
}

/**
 * What a run does before it parks, from the histories of `sample` of the parked runs: each activity
 * type's time from start to completion (the worker's) and from schedule to start (the queue's), the
 * workflow tasks' and the local activities' count.
 */
async function parkingParts(handles: WorkflowHandle[], sample: number) {
  const picked = Array.from({ length: Math.min(sample, handles.length) }, (_, i) => handles[Math.floor((i * handles.length) / sample)]);
  const run = new Map<string, number[]>();
  const wait = new Map<string, number[]>();
  const tasks: number[] = [];
  const locals: number[] = [];
  for (const h of picked) {
    const events = (await h.fetchHistory()).events ?? [];
    const at = new Map(events.map((e) => [Number(e.eventId), e]));
    let wfTaskMs = 0;
    let local = 0;
    for (const e of events) {
      const done = e.activityTaskCompletedEventAttributes;
      if (done) {
        const scheduled = at.get(Number(done.scheduledEventId))!;
        const type = scheduled.activityTaskScheduledEventAttributes!.activityType!.name!;
        const started = at.get(Number(done.startedEventId))!;
        (run.get(type) ?? run.set(type, []).get(type)!).push(eventMs(e) - eventMs(started));
        (wait.get(type) ?? wait.set(type, []).get(type)!).push(eventMs(started) - eventMs(scheduled));
      }
      const wft = e.workflowTaskCompletedEventAttributes;
      if (wft) wfTaskMs += eventMs(e) - eventMs(at.get(Number(wft.startedEventId))!);
      if (e.markerRecordedEventAttributes?.markerName === 'core_local_activity') local++;
    }
    tasks.push(wfTaskMs);
    locals.push(local);
  }
  return { run, wait, tasks, locals, sampled: picked.length };
}

/** The canonical run's wall time and the harness's share of it (wall minus test processes); returns the last run. */
async function canonicalRun(rig: Rig, o: BenchOptions, processMs: () => number): Promise<WorkflowHandle> {
  process.stderr.write('canonical run: harness and test-process time\n');
  const walls: number[] = [];
  const shares: number[] = [];
  let canonical: WorkflowHandle | null = null;
  let canonicalExecMs = 0;
  for (let r = 0; r < o.repeats; r++) {
    const before = processMs();
    const run = await rig.finish(canonicalInput('canonical'));
    if (run.outcome.record.status !== 'completed') throw new Error(`canonical run ended ${run.outcome.record.status}`);
    walls.push(run.ms);
    shares.push((100 * (run.ms - (processMs() - before))) / run.ms);
    canonical = run.handle;
    canonicalExecMs = processMs() - before;
  }
  const parts = await historyParts(canonical!);
  // The same Temporal work doing nothing, on the same server: the part of the harness time no harness avoids.
  const floor = await sdkFloor(rig.env.address, o.repeats, {
    activities: parts.activities,
    locals: parts.localActivities,
    elsewhere: parts.elsewhere,
  });
  const wall = figure('canonical run, wall time', 'ms', walls);
  const harness = figure(
    'canonical run, harness time (wall minus test processes)',
    'ms',
    walls.map((w, i) => (w * shares[i]) / 100),
  );
  figure("canonical run: its activities' schedule to start, summed (the last run)", 'ms', [parts.waitMs]);
  const floorRun = figure(
    `SDK floor: a run of ${parts.activities} no-op activities, ${parts.elsewhere} of them on another worker's queue as a pinned run's, and ${parts.localActivities} no-op local activities (another process, same server)`,
    'ms',
    floor.run,
  );
  const eager = figure(
    `SDK floor: the same run with every activity on its workflow's queue, so each is dispatched with its workflow task (eager)`,
    'ms',
    floor.runEager,
  );
  const floorShare = figure(
    "canonical run, that floor's share (floor run / canonical wall time)",
    '%',
    floor.run.map((f) => (100 * f) / wall.median),
  );
  figure('canonical run, harness share (wall minus test processes)', '%', shares, {
    op: '<=',
    limit: 10,
    why: () =>
      `at 10 % of a run whose test processes take ${fmt(wall.median - harness.median)} ms the harness could spend ${fmt((wall.median - harness.median) / 9)} ms, and it spends ${fmt(harness.median)} ms; the same Temporal work doing nothing (${parts.activities} activities, ${parts.elsewhere} of them on a host's queue, ${parts.localActivities} local activities) takes ${fmt(floorRun.median)} ms, ${fmt(floorShare.median)} % of the run: the floor (${fmt(eager.median)} ms with every activity dispatched eagerly, which a pinned run's activities cannot be), and ${fmt(harness.median - floorRun.median)} ms the harness's own (in the last run, ${parts.activities} regular activities took ${fmt(parts.activityMs - canonicalExecMs)} ms beyond their test processes, ${fmt(parts.waitMs)} ms of it from schedule to start, and ${parts.workflowTasks} workflow tasks ${fmt(parts.workflowTaskMs)} ms)`,
  });
  return canonical!;
}

/** History events and JSON of the canonical run, and per turn of a long read-only run against a short one. */
async function historySize(rig: Rig, canonical: WorkflowHandle, long: RunInput, short: RunInput): Promise<void> {
  process.stderr.write('history size\n');
  const history = async (h: WorkflowHandle) => {
    const json = historyToJSON(await h.fetchHistory());
    return { events: (JSON.parse(json) as { events: unknown[] }).events.length, bytes: Buffer.byteLength(json) };
  };
  const c = await history(canonical);
  figure('history events per canonical run', 'events', [c.events]);
  figure('history JSON per canonical run', 'KB', [c.bytes / 1024]);
  const a = await history((await rig.finish(long)).handle);
  const b = await history((await rig.finish(short)).handle);
  figure(`history events per turn (${READS}-turn run)`, 'events/turn', [(a.events - b.events) / READS]);
  figure(`history JSON per turn (${READS}-turn run)`, 'KB/turn', [(a.bytes - b.bytes) / 1024 / READS]);
}

/** How long parked runs are left before the worker's memory is read again. */
const SETTLE_MS = 60_000;
/** Starts under way at once while runs are parked. */
const PARK_STARTS_AT_ONCE = 8;
/** Parked runs whose histories say what a run does before it parks. */
const PARTS_SAMPLED = 20;
/** Parked runs approved (the rest end with the section's server). */
const APPROVED = 200;

/** A process's resident memory (every thread), from /proc. */
function residentBytes(pid: number): number {
  const line = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!line) throw new Error(`no VmRSS for process ${pid}`);
  return Number(line[1]) * 1024;
}

/** What a parked-runs measure is taken on: a worker process, its first run, and how a run is parked on it. */
interface ParkedSubject {
  label: string;
  /** A worker process polling `taskQueue` on `env`'s server. */
  spawn(env: TestWorkflowEnvironment, taskQueue: string): ChildProcess;
  /** Starts a run that ends by itself (the worker polls and has run once), and one that parks. */
  start(env: TestWorkflowEnvironment, taskQueue: string, workflowId: string, kind: 'once' | 'park'): Promise<WorkflowHandle>;
}

/** A parked measure's memory, in bytes: idle after one run, right after the last run parked, and `SETTLE_MS` later. */
interface ParkedMemory {
  idle: number;
  busy: number;
  settled: number;
}

/** The floor's memory, and what its runs did before they parked. */
interface ParkedFloor extends ParkedMemory {
  before: { activities: number; locals: number };
}

const TRACES = (receiver: OtlpReceiver) => ({ OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url });

/** The harness's worker (`dist/worker/main.js`, as an operator runs it), its runs parked on an approval. */
function harnessSubject(label: string, extraEnv: Record<string, string>): ParkedSubject {
  const add = { path: 'tests/test_agent_parked.py', version: 'absent', old: '', new: 'def test_x():\n    assert True\n' };
  // The operator's longest deadline: parking 10,000 runs takes longer than the fixture's 900 s, and
  // a parked run should meet no deadline on any build (one before `deadline-paused-while-waiting`
  // keeps its timer while it waits, and wakes at it, replayed once evicted).
  const park = replayInput([{ kind: 'tool', call: { call_id: 'add', name: 'apply_patch', arguments: add } }, STOP], {
    approver: 'interactive',
    budgets: { max_turns: READS + 10, max_tool_calls: READS + 10, deadline_s: DEFAULT_MAX_BUDGETS.deadline_s },
  });
  return {
    label,
    spawn: (env, taskQueue) => spawnWorker(env, taskQueue, tempDir('bench-parked'), { AGENT_ALLOW_LOCAL: '1', ...extraEnv }),
    async start(env, taskQueue, workflowId, kind) {
      const handle = await startRun(env.client, kind === 'park' ? park : replayInput([STOP]), { taskQueue, workflowId });
      if (kind === 'once') await runOutcome(handle, null);
      return handle;
    },
  };
}

/**
 * The SDK's floor of a parked run: a worker of `noopParked` runs (scripts/bench-floor.ts), each
 * doing the Temporal work a harness run does before it parks, with nothing in it, then waiting.
 */
function floorSubject(
  label: string,
  extraEnv: Record<string, string>,
  bundle: string,
  before: { activities: number; locals: number },
): ParkedSubject {
  return {
    label,
    spawn: (env, taskQueue) =>
      spawn(process.execPath, [...WORKER_NODE_ARGS, join(__dirname, 'bench-floor.js'), 'park', env.address, taskQueue, bundle], {
        env: workerProcessEnv({ ...process.env, ...extraEnv }),
        stdio: ['ignore', 'ignore', 'pipe'],
      }),
    async start(env, taskQueue, workflowId, kind) {
      const args = [before.activities, before.locals];
      if (kind === 'once') {
        await env.client.workflow.execute('noopRun', { taskQueue, workflowId, args });
        return env.client.workflow.getHandle(workflowId);
      }
      return env.client.workflow.start('noopParked', { taskQueue, workflowId, args });
    },
  };
}

/** `noopParked`'s bundle options: a traced floor has the traced bundle's context manager and OpenTelemetry's interceptors. */
function parkedFloorBundleOptions(traced: boolean) {
  return {
    workflowsPath: require.resolve('./bench-floor-workflows'),
    preloadModules: traced ? [require.resolve('../workflows/trace-context')] : [],
    workflowInterceptorModules: traced ? [require.resolve('./bench-floor-interceptors')] : [],
  };
}

/** The floor's workflow bundle of each kind, made here once, as the build makes the harness's. */
async function floorBundle(traced: boolean): Promise<string> {
  const file = join(tempDir('bench-floor-bundle'), 'bundle.js');
  writeFileSync(file, (await bundleWorkflowCode({ ...parkedFloorBundleOptions(traced), logger: quietLogger })).code);
  return file;
}

/**
 * What one more workflow in a worker thread's cache costs, on each of the build's bundles
 * (scripts/bench-new-workflows.ts, in a process of its own): the heap it keeps and the CPU of
 * making it. A parked run keeps the first while cached; a burst of starts makes both once per run.
 */
function newWorkflows(o: BenchOptions): void {
  const script = join(__dirname, 'bench-new-workflows.js');
  const out = execFileSync(process.execPath, ['--expose-gc', script, '100', String(o.repeats)], { encoding: 'utf8' });
  for (const [kind, { kib, cpu }] of Object.entries(JSON.parse(out) as Record<string, { kib: number[]; cpu: number[] }>)) {
    figure(`a new workflow, ${kind} bundle: heap it keeps while cached`, 'KiB', kib);
    figure(`a new workflow, ${kind} bundle: CPU to make it`, 'ms', cpu);
  }
}

/**
 * Parked runs and the worker's memory, without traces and with traces exported: for each, a worker
 * process of its own on a fresh dev server, its resident memory idle after one run, with `o.parked`
 * runs parked on an approval (started `PARK_STARTS_AT_ONCE` at a time) and once they have sat a
 * while. Then the same for the SDK's floor, a worker that parks runs doing the same Temporal work
 * with nothing in it, so that a miss of the harness's target can be set against what a worker of
 * the SDK holds for as many parked runs. The traced workers export to a local OTLP receiver, and
 * the spans it received are counted.
 */
async function benchParked(o: BenchOptions): Promise<void> {
  newWorkflows(o);
  const receiver = await new OtlpReceiver().start();
  try {
    const floors = new Map<boolean, ParkedFloor>();
    const traceLabel = (traced: boolean) => (traced ? 'with traces exported' : 'without traces');
    const harness: Awaited<ReturnType<typeof parkedOn>>[] = [];
    for (const traced of o.parkedTraces)
      harness.push(
        await parkedOn(harnessSubject(traceLabel(traced), traced ? TRACES(receiver) : {}), o, traced ? receiver : undefined, () =>
          floors.get(traced),
        ),
      );
    const parts = harness[0].parts!;
    const activities = [...parts.run.values()].reduce((n, ms) => n + ms.length, 0) / parts.sampled;
    const before = { activities: Math.round(activities), locals: medianOf(parts.locals) };
    for (const traced of o.parkedTraces) {
      const label = `SDK floor, ${traceLabel(traced)}`;
      process.stderr.write(
        `the SDK floor's parked run: ${before.activities} no-op activities and ${before.locals} no-op local activities, then a wait\n`,
      );
      const subject = floorSubject(label, traced ? TRACES(receiver) : {}, await floorBundle(traced), before);
      const { memory } = await parkedOn(subject, o, traced ? receiver : undefined);
      floors.set(traced, { ...memory, before });
    }
    const plain = harness.find((h) => h.approveMs > 0);
    if (plain) figure(`approve ${plain.approved} of the parked runs (signal, write, end; 16 at a time)`, 's', [plain.approveMs / 1000]);
  } finally {
    await receiver.close();
  }
}

async function parkedOn(subject: ParkedSubject, o: BenchOptions, receiver?: OtlpReceiver, floor?: () => ParkedFloor | undefined) {
  const { label } = subject;
  const harness = floor !== undefined;
  process.stderr.write(`${o.parked} runs parked, ${label}\n`);
  const env = await startServer();
  const taskQueue = uniqueQueue('parked');
  const worker = subject.spawn(env, taskQueue);
  const spansBefore = receiver?.spans.length ?? 0;
  let said = '';
  worker.stderr?.on('data', (c: Buffer) => (said = (said + c.toString()).slice(-4000)));
  worker.once('exit', (code) => {
    if (code !== 0 && code !== null) process.stderr.write(`  the worker ended (${code}): ${said}\n`);
  });
  try {
    let n = 0;
    await subject.start(env, taskQueue, `parked-${++n}`, 'once');
    await sleep(5000);
    const idle = residentBytes(worker.pid!);
    const parked: WorkflowHandle[] = [];
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: PARK_STARTS_AT_ONCE }, async () => {
        while (parked.length < o.parked) {
          const slot = parked.length;
          parked.push(null as unknown as WorkflowHandle);
          parked[slot] = await subject.start(env, taskQueue, `parked-${++n}`, 'park');
        }
      }),
    );
    const started = performance.now() - t0;
    const waiting = async () =>
      (await env.client.workflow.count(`WorkflowId STARTS_WITH "parked-" AND AgentStatus = "awaiting_approval"`)).count;
    while ((await waiting()) < o.parked) await sleep(500);
    const parkedMs = performance.now() - t0;
    process.stderr.write(`  started in ${(started / 1000).toFixed(1)} s, all parked after ${(parkedMs / 1000).toFixed(1)} s\n`);
    const busy = residentBytes(worker.pid!);
    // What a harness run does before it parks (the floor's runs do what it says, and nothing else).
    const parts = harness ? await parkingParts(parked, PARTS_SAMPLED) : null;
    if (parts) {
      for (const [type, ms] of parts.run) {
        figure(`before a run parks, ${label}: ${type}, start to completion (${parts.sampled} runs' histories)`, 'ms', ms);
        figure(`before a run parks, ${label}: ${type}, schedule to start`, 'ms', parts.wait.get(type)!);
      }
      figure(
        `before a run parks, ${label}: its workflow tasks, start to completion, summed (${parts.locals[0]} local activities)`,
        'ms',
        parts.tasks,
      );
    }
    await sleep(SETTLE_MS);
    const memory = { idle, busy, settled: residentBytes(worker.pid!) };
    figure(`parking ${o.parked} runs, ${label} (${PARK_STARTS_AT_ONCE} starts at a time, until each waits)`, 'runs/s', [
      o.parked / (parkedMs / 1000),
    ]);
    figure(`worker resident memory, idle, ${label}`, 'MiB', [idle / 2 ** 20]);
    const busyFigure = figure(`worker resident memory, ${o.parked} runs parked, ${label}`, 'MiB', [busy / 2 ** 20]);
    const later = figure(`worker resident memory, ${o.parked} runs parked, ${SETTLE_MS / 1000} s later, ${label}`, 'MiB', [
      memory.settled / 2 ** 20,
    ]);
    if (receiver) figure(`spans the receiver took, ${label}`, 'spans', [receiver.spans.length - spansBefore]);
    const ratio = (at: 'busy' | 'settled', m: ParkedMemory) => fmt(m[at] / m.idle);
    const why = (at: 'busy' | 'settled') => () => {
      const f = floor?.();
      const against = f
        ? `; the SDK's floor, a worker parking as many runs that do the same Temporal work with nothing in it (${f.before.activities} no-op activities and ${f.before.locals} no-op local activities before the wait), held ${ratio(at, f)}x its idle memory (${fmt(f.idle / 2 ** 20)} MiB idle) at the same moment, and this worker ${ratio(at, memory)}x`
        : '';
      return `the worker went from ${fmt(idle / 2 ** 20)} MiB idle to ${fmt(busyFigure.median)} MiB with ${o.parked} runs parked (${fmt((busy - idle) / o.parked / 1024)} KiB a run) and was at ${fmt(later.median)} MiB ${SETTLE_MS / 1000} s later: what stays is the garbage of ${o.parked} starts in the workflow thread's V8 heap and glibc's arenas (a parked run is evicted from the cache of ${SETTINGS.maxCachedWorkflows} and holds nothing in the worker)${against}`;
    };
    const target = (at: 'busy' | 'settled') => (harness ? { op: '<' as const, limit: 1.5, why: why(at) } : undefined);
    figure(`parked / idle memory, right after the last run parked, ${label}`, 'x', [busy / idle], target('busy'));
    figure(`parked / idle memory, ${SETTLE_MS / 1000} s later, ${label}`, 'x', [memory.settled / idle], target('settled'));
    if (receiver || !harness) return { memory, parts, approved: 0, approveMs: 0 };
    // Approving goes through the real Signal: the run is replayed (it was evicted), writes and ends.
    const approve = parked.slice(0, Math.min(APPROVED, parked.length));
    const approved = await timed(async () => {
      let next = 0;
      await Promise.all(
        Array.from({ length: 16 }, async () => {
          while (next < approve.length) {
            const h = approve[next++];
            const p = (await queryState(h)).pending_approval!;
            await sendApproval(h, approvalFor(p, 'approve', 'user:bench'));
            await h.result();
          }
        }),
      );
    });
    return { memory, parts, approved: approve.length, approveMs: approved.ms };
  } finally {
    worker.kill('SIGTERM');
    await killed(worker);
    await env.teardown();
  }
}

/** Git on `tree` with its own folder kept beside it, so git and the manifest look at exactly the same files. */
function gitBeside(tree: string): (...args: string[]) => Buffer {
  const gitDir = join(tree, '..', 'git');
  const config = ['user.name=bench', 'user.email=bench@localhost', 'gc.auto=0', 'maintenance.auto=false'].flatMap((c) => ['-c', c]);
  return (...args) =>
    execFileSync('git', ['--git-dir', gitDir, '--work-tree', tree, ...config, ...args], {
      cwd: tree,
      stdio: ['ignore', 'pipe', 'ignore'],
      maxBuffer: 64 * 2 ** 20,
    });
}

/** The manifest of an unchanged workspace against `git status` on the same tree. */
async function benchManifest(o: BenchOptions): Promise<void> {
  process.stderr.write(`manifest of an unchanged ${o.files}-file workspace against git status\n`);
  const tree = join(tempDir('bench-tree'), 'repo');
  const files = numberedFiles(o.files);
  writeFiles(tree, files);
  const git = gitBeside(tree);
  const written = Date.now();
  git('init', '-q');
  git('add', '-A');
  git('commit', '-qm', 'tree');
  git('status', '--porcelain'); // index refreshed once, as any user's tree is
  // The workspace's own stat cache, filled once as the run's first check would.
  await pastRacyMargin(written);
  workspaceDigest(tree);
  const paths = Object.keys(files).map((p) => join(tree, p));
  const gitMs: number[] = [];
  const manifestMs: number[] = [];
  const lstatMs: number[] = [];
  for (let r = 0; r < Math.min(o.repeats, 3); r++) {
    gitMs.push(msOf(() => git('status', '--porcelain')));
    manifestMs.push(msOf(() => workspaceDigest(tree)));
    lstatMs.push(
      msOf(() => {
        for (const p of paths) lstatSync(p);
      }),
    );
  }
  const gitFigure = figure(`git status, ${o.files} files`, 'ms', gitMs);
  figure(`workspace manifest check (its digest, as apply_patch asks), ${o.files} files`, 'ms', manifestMs);
  const lstatFigure = figure(`lstatSync of every file alone, ${o.files} files`, 'ms', lstatMs);
  figure(
    'manifest / git status',
    'x',
    manifestMs.map((v, i) => v / gitMs[i]),
    {
      op: '<=',
      limit: 1.5,
      why: () =>
        `one lstatSync per file, which no check of an unchanged tree can skip, already takes ${fmt(lstatFigure.median / gitFigure.median)}x git status here (git stats from C, on every core)`,
    },
  );
}

function benchCli(o: BenchOptions): void {
  process.stderr.write('command-line start\n');
  const cli = join(PROJECT_ROOT, 'dist', 'client', 'cli.js');
  const starts: number[] = [];
  for (let r = 0; r < o.repeats; r++) starts.push(msOf(() => execFileSync(process.execPath, [cli, '--help'], { stdio: 'ignore' })));
  figure('command-line start on a built tree (--help)', 'ms', starts, { op: '<', limit: 1000 });
}

/**
 * A repository's import as a worker does it (loadRun's reading of the base, then the workspace
 * written from its tree, workspace/repository.ts) through the reading container and through this
 * machine's git, on a repository of `o.importFiles` files; and the largest event-loop stall of
 * this process while it imports, while a tree of 200,000 paths is refused and while a test's
 * 100,000 new files are undone, each with the stall's target of docs/security.md.
 */
async function benchImport(o: BenchOptions, settings: Settings): Promise<void> {
  process.stderr.write(`import of a ${o.importFiles}-file repository, and event-loop stalls\n`);
  const repo = join(tempDir('bench-import'), 'repo');
  writeFiles(repo, numberedFiles(o.importFiles));
  const git = (...args: string[]) =>
    execFileSync('git', args, { cwd: repo, maxBuffer: 1 << 26 })
      .toString()
      .trim();
  git('init', '-q');
  git('add', '-A');
  git('-c', 'user.name=bench', '-c', 'user.email=bench@localhost', 'commit', '-q', '-m', 'files');
  const base = git('rev-parse', 'HEAD');
  const readers = repositoryReaders(settings);
  const limits = settings.repositoryLimits;
  const importOnce = async (read: RepositoryRead) => {
    const open = readers(read);
    const source = { path: repo, base_commit: base, task: 'bench', tests: { command: ['true'], format: 'pytest' as const, timeout_s: 60 } };
    const loaded = await loadRepository(open, limits, source, () => 'none');
    if (!loaded.ok) throw new Error(`bench import: ${loaded.detail}`);
    const prepared = await prepareRepositoryWorkspace(runPaths(tempDir('bench-import-state'), 'run-1'), loaded.ref, open, limits);
    if (prepared.files !== o.importFiles) throw new Error(`bench import: ${prepared.files} files, not ${o.importFiles}`);
  };
  /** `fn`'s milliseconds and this process's largest event-loop stall meanwhile. */
  const stalled = async (fn: () => Promise<unknown>) => {
    const loop = monitorEventLoopDelay({ resolution: 10 });
    loop.enable();
    const t = await timed(fn);
    // A stall at fn's very end is recorded when the histogram's timer next fires, after fn has returned.
    await new Promise((resolve) => setTimeout(resolve, 50));
    loop.disable();
    return { ms: t.ms, stall: loop.max / 1e6 };
  };
  await importOnce('host'); // warm: the page cache and the modules, for both
  const host: number[] = [];
  const sandbox: number[] = [];
  const stalls: number[] = [];
  for (let r = 0; r < o.repeats; r++) {
    host.push((await stalled(() => importOnce('host'))).ms);
    const s = await stalled(() => importOnce('sandbox'));
    sandbox.push(s.ms);
    stalls.push(s.stall);
  }
  const onHost = figure(`import of a ${o.importFiles}-file repository, this machine's git (trusted)`, 'ms', host);
  figure(`import of a ${o.importFiles}-file repository, git in the reading container`, 'ms', sandbox, {
    op: '<=',
    limit: Math.round(1.5 * onHost.median),
    why: () => `the container's start and one docker exec per command over the ${fmt(onHost.median)} ms of the same reading here`,
  });
  const STALL = { op: '<=' as const, limit: 250 };
  figure(`largest event-loop stall during that import (container)`, 'ms', stalls, STALL);

  // A tree of 200,000 paths: refused as its listing streams.
  const many = manyPathsCommit(repo, base, 200, 1000);
  const refusals: number[] = [];
  for (let r = 0; r < o.repeats; r++)
    refusals.push(
      (
        await stalled(async () => {
          const loaded = await loadRepository(readers('sandbox'), limits, { path: repo, base_commit: many, task: 'bench' }, () => 'none');
          if (loaded.ok || !loaded.detail.startsWith('too_large')) throw new Error('bench import: 200,000 paths were not refused');
        })
      ).stall,
    );
  figure('largest event-loop stall while 200,000 paths are refused (container)', 'ms', refusals, STALL);

  // A test process that left 100,000 files, undone.
  const t = prepareRun({ repo: numberedFiles(100) });
  const undone: number[] = [];
  for (let r = 0; r < o.repeats; r++)
    undone.push(
      (
        await stalled(() =>
          withUndo(t.ctx.paths, () =>
            // The test: another process, as a test is.
            promisify(execFile)('python3', ['-c', "import os\nos.mkdir('many')\nfor i in range(100000): open(f'many/{i}', 'w').close()"], {
              cwd: t.workspace,
            }),
          ),
        )
      ).stall,
    );
  figure('largest event-loop stall while a test process leaves 100,000 files and they are undone', 'ms', undone, STALL);

  // A test process that leaves files in its own temporary folder (its TMPDIR: the run's report folder), removed after it.
  const script = `import os, sys\nfor i in range(${TMP_FILES}): open(os.path.join(os.environ['TMPDIR'], str(i)), 'w').close()\nopen(sys.argv[1], 'w').write('<testsuite/>')`;
  const tests: TestsSpec = { command: ['python3', '-c', script, JUNIT_PLACEHOLDER], format: 'junit', timeout_s: 600 };
  const left: number[] = [];
  for (let r = 0; r < o.repeats; r++)
    left.push((await stalled(() => runTestsIn({ ...t.ctx, fixture: { tests } }, t.workspace, t.ctx.paths.control))).stall);
  figure(`largest event-loop stall while a test process leaves ${TMP_FILES} files in its TMPDIR and they are removed`, 'ms', left, STALL);
}

/** Files the import section's test process leaves in its TMPDIR: under the default bound of files a test may leave. */
const TMP_FILES = 40_000;

/**
 * What undoing a test process's changes costs (workspace/byproducts.ts) on a workspace of
 * `o.undoFiles` files, as run_tests and the verifier pay it around each process: the manifest
 * before, the state written down, the manifest after, and the restore; the process's own time left
 * out. Once around a process that changes nothing, once around one that rewrites 3 files (one of
 * them a receipted write, restored from its kept copy) and adds 2.
 */
async function benchUndo(o: BenchOptions): Promise<void> {
  process.stderr.write(`undo of a test process's changes, ${o.undoFiles}-file workspace\n`);
  const t = prepareRun({ repo: numberedFiles(o.undoFiles), fixture: { writable: ['d0/f0.txt'] } });
  const written = Date.now();
  // A receipted write, as a run has before its tests: its bytes are kept by digest, not in the baseline.
  const args = { path: 'd0/f0.txt', version: sha256('file 0\n'), old: 'file 0', new: 'file 0, fixed' };
  const prepared = await preparePatch(t.ctx, 'fix', args);
  if (prepared.kind !== 'prepared') throw new Error('bench undo: the write was not prepared');
  await writePatch(t.ctx, prepared.action, args);
  await pastRacyMargin(written);
  // The check in the workspace thread the undo runs in, so both figures are of the same place.
  const digest = () => offThread('digest', [t.workspace], { key: t.workspace });
  await digest();
  const check: number[] = [];
  const none: number[] = [];
  const some: number[] = [];
  for (let r = 0; r < o.repeats; r++) {
    check.push((await timed(digest)).ms);
    const quiet = await timed(() => withUndo(t.ctx.paths, async () => null));
    none.push(quiet.ms);
    if (quiet.value.undone !== null) throw new Error('bench undo: a process that changed nothing was reported');
    let own = 0;
    const noisy = await timed(() =>
      withUndo(t.ctx.paths, async () => {
        own = msOf(() => {
          for (const path of ['d0/f0.txt', 'd1/f1.txt', 'd2/f2.txt']) writeFileSync(join(t.workspace, path), `rewritten ${r}\n`);
          for (const path of ['d3/new.txt', 'd4/new.txt']) writeFileSync(join(t.workspace, path), 'added\n');
        });
      }),
    );
    some.push(noisy.ms - own);
    if (noisy.value.undone?.count !== 5) throw new Error(`bench undo: ${noisy.value.undone?.count ?? 0} paths undone, not 5`);
    // The restored files are new: the next check digests them again once they are older than the margin.
    await sleep(RACY_MARGIN_MS + 100);
    await digest();
  }
  const checkFigure = figure(`workspace manifest check alone, ${o.undoFiles} files`, 'ms', check);
  // Targets in units of that check, measured in the same run: the undo is two checks (before and after) plus a small record.
  figure(`a test run on a ${o.undoFiles}-file workspace: the undo's cost, nothing changed`, 'ms', none, {
    op: '<=',
    limit: Math.round(2.5 * checkFigure.median),
    why: () => `two manifest checks (before and after, ${fmt(checkFigure.median)} ms each here) and the state written down with two fsyncs`,
  });
  figure(`a test run on a ${o.undoFiles}-file workspace: the undo's cost, 5 files changed`, 'ms', some, {
    op: '<=',
    limit: Math.round(3 * checkFigure.median),
    why: () => 'each restored file copied, digested before it is renamed into place and again after, and the changed paths compared',
  });
}

/**
 * The setup phase, first run against a cached one (SPEC section 11): a repository whose setup
 * pip-installs a wheel from a package index on this machine through the egress proxy, run on the
 * docker backend; then run again with the same inputs, which starts from the cache image. The
 * time is the `runSetup` activity's, from its history events (scheduled to completed). Skipped
 * with BENCH_SETUP=0, or when the engine or its images are missing (the reason is printed).
 */
async function benchSetupCache(o: BenchOptions, settings: Settings): Promise<void> {
  if (!o.setup) return void process.stderr.write('setup phase: skipped (BENCH_SETUP=0)\n');
  const egress = await import('./support/egress');
  const Dockerode = (await import('dockerode')).default;
  try {
    const docker = new Dockerode();
    for (const image of [settings.sandboxImage, settings.proxyImage, egress.PIP_IMAGE]) await docker.getImage(image).inspect();
  } catch (err) {
    return void process.stderr.write(`setup phase: skipped (${(err as Error).message}; run scripts/ensure-docker.sh)\n`);
  }
  process.stderr.write('setup phase, first run against the cached one\n');
  const wheel = egress.buildWheel('greetlib', '1.0', 'def greet(name):\n    return "hello " + name\n');
  const index = await egress.packageIndex([{ name: 'greetlib', ...wheel }]);
  const first: number[] = [];
  const cached: number[] = [];
  try {
    const worker = {
      stateDir: tempDir('bench-setup-state'),
      // The index is on this machine's bridge address: opened as an operator opens a private registry.
      settings: { ...settings, ...egress.allowingPip(settings.allowedImages), ...(await egress.localUpstreamSettings()) },
    };
    const replay = egress.finalOnlyReplay();
    const pip = ['pip', 'install', '--no-cache-dir', '--break-system-packages', '--disable-pip-version-check'];
    const from = ['--index-url', `http://${egress.INDEX_HOST}:${index.port}/simple/`, '--trusted-host', egress.INDEX_HOST];
    await onWorker('bench-setup', worker, async (rig) => {
      for (let r = 0; r < Math.min(o.repeats, 3); r++) {
        // A repository of its own each time, so the first run really is one (its base tree is new).
        const repo = egress.pythonRepo(
          { setup: { commands: [[...pip, ...from, 'greetlib']], timeout_s: 120 }, egress: { allow: [egress.INDEX_HOST] } },
          { 'notes.txt': `bench repeat ${r} ${Date.now()}\n` },
        );
        first.push(await setupMs(rig, repo, replay));
        cached.push(await setupMs(rig, repo, replay));
      }
    });
  } finally {
    await index.close();
  }
  figure('setup phase, first run (proxy, probe, one pip install, commit, products)', 'ms', first);
  figure('setup phase, cached run (cache image found, products)', 'ms', cached);
  figure(
    'setup, cached vs first',
    '%',
    cached.map((c, i) => (100 * c) / first[i]),
    {
      op: '<',
      limit: 10,
      why: () => 'the cached run still starts the sandbox from the cache image and copies the setup products back',
    },
  );
}

/** Milliseconds of the `runSetup` activity of a run of `repo` on the docker backend, from its history. */
async function setupMs(rig: Rig, repo: { dir: string; head: string }, replay: string): Promise<number> {
  const { handle, outcome } = await rig.finish({
    repo: { path: repo.dir, base_commit: repo.head, task: 'Make the tests pass.' },
    source: { kind: 'replay', path: replay, trusted: true },
    backend: 'docker',
    approver: 'policy:approve-writable',
  });
  const run = `bench setup run ${handle.workflowId}`;
  if (outcome.record.status !== 'completed')
    throw new Error(`${run} ended ${outcome.record.status}/${outcome.record.reason}: ${outcome.state.detail}`);
  const events = (await handle.fetchHistory()).events ?? [];
  const scheduled = events.find((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'runSetup');
  const completed = events.find(
    (e) => Number(e.activityTaskCompletedEventAttributes?.scheduledEventId ?? -1) === Number(scheduled?.eventId ?? -2),
  );
  if (!scheduled || !completed) throw new Error(`${run}: no runSetup activity in its history`);
  return eventMs(completed) - eventMs(scheduled);
}

/** Milliseconds of a run's first activity of `type`, scheduled to completed, from its history (null: none). */
async function activityMs(handle: WorkflowHandle, type: string): Promise<number | null> {
  const events = (await handle.fetchHistory()).events ?? [];
  const scheduled = events.find((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === type);
  const completed = events.find(
    (e) => Number(e.activityTaskCompletedEventAttributes?.scheduledEventId ?? -1) === Number(scheduled?.eventId ?? -2),
  );
  return scheduled && completed ? eventMs(completed) - eventMs(scheduled) : null;
}

/** A copy of the canonical fixture whose base tree is its own (a file no other copy has). */
function freshLinkcheck(tag: string): string {
  const dir = join(tempDir('bench-baseline-fixture'), 'linkcheck-nested');
  cpSync(LINKCHECK, dir, { recursive: true });
  writeFiles(join(dir, 'repo'), { 'bench-notes.txt': `${tag} ${process.pid} ${performance.now()}\n` });
  return dir;
}

/**
 * The base run of the candidate tests (sandbox/baseline.ts): the canonical run on a base tree the
 * host has not seen (the base run's test process runs) and again on the same tree (its outcomes
 * kept: no base run), and a batch of 8 epochs of one fixture, where only the first pays.
 */
async function benchBaseline(o: BenchOptions, settings: Settings): Promise<void> {
  let baseProcesses = 0;
  const worker: Omit<WorkerOptions, 'connection' | 'taskQueue'> = {
    stateDir: tempDir('bench-baseline-state'),
    docker: false,
    settings: { ...settings, allowLocal: true },
    // Test processes of a base run run in its copy of the base tree (workspace/verification-tree.ts).
    wrapBackend: (b) => ({
      name: b.name,
      exec: (spec) => {
        if (/[\\/]verify[\\/]base-/.test(spec.workspaceDir)) baseProcesses++;
        return b.exec(spec);
      },
    }),
  };
  await onWorker('bench-baseline', worker, async (rig) => {
    process.stderr.write('the base run: a canonical run with it and without it, a batch of 8 epochs\n');
    await rig.finish(canonicalInput('canonical', { fixture: freshLinkcheck('warm-up') }));
    const withBase: number[] = [];
    const without: number[] = [];
    const baseMs: number[] = [];
    const keptMs: number[] = [];
    for (let r = 0; r < o.repeats; r++) {
      const fixture = freshLinkcheck(`repeat ${r}`);
      const first = await rig.finish(canonicalInput('canonical', { fixture }));
      const again = await rig.finish(canonicalInput('canonical', { fixture }));
      for (const run of [first, again])
        if (run.outcome.record.status !== 'completed')
          throw new Error(`bench run ${run.handle.workflowId} ended ${run.outcome.record.status}`);
      if (first.outcome.state.base_tests?.cached !== false || again.outcome.state.base_tests?.cached !== true)
        throw new Error('the base run was not taken once, then kept');
      withBase.push(first.ms);
      without.push(again.ms);
      baseMs.push((await activityMs(first.handle, 'baselineTests'))!);
      keptMs.push((await activityMs(again.handle, 'baselineTests'))!);
    }
    const a = figure('canonical run with a base run (a base tree new to the host)', 'ms', withBase);
    const b = figure('canonical run without one (the base outcomes kept)', 'ms', without);
    figure('base run of the candidate tests (baselineTests activity, tests run)', 'ms', baseMs);
    figure('base outcomes kept (baselineTests activity, nothing run)', 'ms', keptMs, {
      op: '<',
      limit: 100,
      why: () =>
        `the activity reads the kept outcomes from the host store; the base run itself costs ${fmt(a.median - b.median)} ms of a run`,
    });

    const fixture = freshLinkcheck('batch');
    const plan: EvalPlan = {
      fixtures: [{ dir: fixture, replays: [{ path: join(fixture, 'replays', 'canonical.json'), name: 'canonical', trusted: true }] }],
      epochs: 8,
      backend: 'local',
      approver: 'policy:approve-writable',
    };
    const before = baseProcesses;
    const batch = `bench-baseline-batch-${process.pid}`;
    await evalResult(await startEval(rig.env.client, { plan, concurrency: 2 }, { taskQueue: rig.taskQueue, workflowId: batch }));
    const epochMs: number[] = [];
    for (let i = 0; i < planSize(plan); i++) {
      const handle = rig.env.client.workflow.getHandle(runWorkflowId(batch, plan, plannedRun(plan, i), 1));
      const outcome = await runOutcome(handle, null);
      if (outcome.record.status !== 'completed') throw new Error(`bench batch run ${handle.workflowId} ended ${outcome.record.status}`);
      epochMs.push((await activityMs(handle, 'baselineTests'))!);
    }
    figure('a batch of 8 epochs: base runs of test processes', 'runs', [baseProcesses - before], {
      op: '<=',
      limit: 1,
      why: () => 'each epoch of the batch has the same base tree and command',
    });
    figure('a batch of 8 epochs: baselineTests activity, epoch 1', 'ms', epochMs.slice(0, 1));
    figure('a batch of 8 epochs: baselineTests activity, epochs 2-8', 'ms', epochMs.slice(1));
  });
}

/** Steps of the run whose closed trace one stream reads whole (three events a step). */
const STREAM_STEPS = 1000;
/** Events timed from the workflow to a client, per repeat. */
const STREAM_EVENTS = 20;

/**
 * The console's event stream (docs/delivery.md): how long an event in the workflow takes to reach
 * a connected client, how long an approval sent by one client takes to show as resolved on
 * another, and how many frames one stream delivers per second, each on a console and a worker of
 * this process (one machine), the console asking each followed run every 100 ms.
 */
/** A console on loopback over `stateDir`, with one API token for the bench's clients. */
async function benchConsole(client: Parameters<typeof startConsole>[0]['client'], stateDir: string, name: string) {
  const token = `bench-${name}-token-0123456789-0123456789`;
  const app = await startConsole({
    client,
    token: `bench-${name}-console-token`,
    host: '127.0.0.1',
    port: 0,
    webUi: null,
    namespace: 'default',
    stateDir,
    apiTokens: new Map([['bench', token]]),
  });
  return { app, token };
}

async function benchStream(o: BenchOptions, settings: Settings): Promise<void> {
  const stateDir = tempDir('bench-stream-state');
  const worker = { stateDir, docker: false as const, settings: { ...settings, allowLocal: true } };
  await onWorker('stream', worker, async (rig) => {
    const { app, token } = await benchConsole(rig.env.client, stateDir, 'stream');
    try {
      const link = { url: app.url, token };
      await eventLatency(rig, o, link);
      await approvalShown(rig, o, app, link);
      await framesPerSecond(rig, o, link);
    } finally {
      await app.close();
    }
  });
}

/** A run parked on the approval of its one write (it takes steering while it waits). */
const parkedRun = () =>
  replayInput(
    [
      {
        kind: 'tool',
        call: {
          call_id: 'add',
          name: 'apply_patch',
          arguments: { path: 'tests/test_agent_parked.py', version: 'absent', old: '', new: 'def test_x():\n    assert True\n' },
        },
      },
      STOP,
    ],
    { approver: 'interactive' },
  );

/** Reads frames of one stream in the background; `next(test)` resolves at the first frame passing `test` after the call. */
function frameWaiter(link: ConsoleLink, workflowId: string): { next: (test: (f: Frame) => boolean) => Promise<number>; stop: () => void } {
  const abort = new AbortController();
  const waiting: { current: { test: (f: Frame) => boolean; resolve: (at: number) => void } | null } = { current: null };
  void (async () => {
    try {
      for await (const f of runFrames(link, workflowId, { after: '0', version: 2, signal: abort.signal })) {
        if (waiting.current?.test(f)) {
          waiting.current.resolve(performance.now());
          waiting.current = null;
        }
      }
    } catch {
      // Stopped.
    }
  })();
  return {
    next: (test) => new Promise((resolve) => (waiting.current = { test, resolve })),
    stop: () => abort.abort(),
  };
}

/** Steering a parked run: from the Signal to the event in a tight Query loop, and to the frame on a connected client. */
async function eventLatency(rig: Rig, o: BenchOptions, link: ConsoleLink): Promise<void> {
  process.stderr.write(`event stream: ${STREAM_EVENTS * o.repeats} events from the workflow to a client\n`);
  const handle = await rig.start(parkedRun());
  while ((await queryState(handle)).status !== 'awaiting_approval') await sleep(50);
  const frames = frameWaiter(link, handle.workflowId);
  const toClient: number[] = [];
  const toQuery: number[] = [];
  try {
    await sleep(1000);
    for (let i = 0; i < STREAM_EVENTS * o.repeats; i++) {
      const message = `bench ${i}`;
      const seen = frames.next((f) => (f.event as { data?: { message?: string } } | undefined)?.data?.message === message);
      const before = (await queryTrace(handle, { tail: 1 })).newest;
      const t0 = performance.now();
      await sendSteer(handle, message, `bench-steer-${i}`);
      while ((await queryTrace(handle, { after: before })).events.length === 0);
      toQuery.push(performance.now() - t0);
      toClient.push((await seen) - t0);
      await sleep(50 + (i % 7) * 17); // not in step with the console's 100 ms tick
    }
  } finally {
    frames.stop();
    await handle.terminate('bench done');
  }
  const query = figure('event stream: a Signal to its event, seen by a tight Query loop (the floor)', 'ms', toQuery);
  figure('event stream: an event in the workflow to a connected client (Signal to frame)', 'ms', toClient, {
    op: '<=',
    limit: 250,
    why: () => `the Signal itself takes ${fmt(query.median)} ms to become an event; the console asks each followed run every 100 ms`,
  });
}

/** Parked runs approved over the API by one client, each timed until another client's stream shows it resolved. */
async function approvalShown(rig: Rig, o: BenchOptions, app: RunningConsole, link: ConsoleLink): Promise<void> {
  process.stderr.write(`event stream: ${o.repeats} approvals sent by one client, shown on another\n`);
  const shown: number[] = [];
  for (let r = 0; r < o.repeats; r++) {
    const handle = await rig.start(parkedRun());
    let p = (await queryState(handle)).pending_approval;
    while (p === null) {
      await sleep(50);
      p = (await queryState(handle)).pending_approval;
    }
    const frames = frameWaiter(link, handle.workflowId);
    try {
      await sleep(500);
      const resolved = frames.next((f) => f.type === 'card' && f.state === 'approved');
      const t0 = performance.now();
      const res = await fetch(`${app.url}/api/runs/${encodeURIComponent(handle.workflowId)}/actions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${link.token}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          id: `approve-${r}`,
          action: 'approve',
          action_id: p.action_id,
          args_digest: p.args_digest,
          workspace_digest: p.workspace_digest,
        }),
      });
      if (res.status !== 200) throw new Error(`bench stream: the approval answered ${res.status}: ${await res.text()}`);
      shown.push((await resolved) - t0);
      await runOutcome(handle, null);
    } finally {
      frames.stop();
    }
  }
  figure('event stream: an approval sent by one client, resolved on another', 'ms', shown, { op: '<=', limit: 1000 });
}

/** One stream reading a closed run of STREAM_STEPS read-only steps whole, from the store, to its end. */
async function framesPerSecond(rig: Rig, o: BenchOptions, link: ConsoleLink): Promise<void> {
  process.stderr.write(`event stream: frames per second of one stream (a closed run of ${STREAM_STEPS} steps)\n`);
  const run = await rig.finish(
    replayInput([...Array.from({ length: STREAM_STEPS }, (_, i) => read(i)), STOP], {
      budgets: { max_turns: STREAM_STEPS + 10, max_tool_calls: STREAM_STEPS + 10 },
    }),
  );
  const rates: number[] = [];
  let frames = 0;
  for (let r = 0; r < o.repeats; r++) {
    frames = 0;
    const t0 = performance.now();
    for await (const f of runFrames(link, run.handle.workflowId, { after: '0', version: 1 })) if (f.id) frames++;
    rates.push((frames * 1000) / (performance.now() - t0));
  }
  figure(`event stream: frames per second on one stream (${frames} frames of a closed run, from the store)`, 'frames/s', rates);
}

/** Worker processes the hint section SIGKILLs. */
const HINT_KILLS = 20;

/**
 * The `no_worker` hint (docs/delivery.md): a run parked on its approval, served by a worker
 * process that is SIGKILLed again and again, a new one started after each; each time, from the
 * SIGKILL to the hint's frame on a client of the console's stream.
 */
async function benchHint(): Promise<void> {
  process.stderr.write(`no_worker hint: ${HINT_KILLS} worker processes SIGKILLed under a followed run\n`);
  const env = await startServer();
  const stateDir = tempDir('bench-hint-state');
  const taskQueue = uniqueQueue('hint');
  const { app, token } = await benchConsole(env.client, stateDir, 'hint');
  const worker = () => {
    const child = spawnWorker(env, taskQueue, stateDir, { AGENT_ALLOW_LOCAL: '1' });
    child.stderr?.resume();
    return child;
  };
  let current = worker();
  const latency: number[] = [];
  try {
    const handle = await startRun(env.client, parkedRun(), { taskQueue, workflowId: 'hint-parked' });
    while ((await queryState(handle).catch(() => null))?.status !== 'awaiting_approval') await sleep(100);
    const frames = frameWaiter({ url: app.url, token }, handle.workflowId);
    const hint = (kind: string) => (f: Frame) => f.type === 'hint' && (f as { hint?: string }).hint === kind;
    try {
      await sleep(1000);
      for (let i = 0; i < HINT_KILLS; i++) {
        const shown = frames.next(hint('no_worker'));
        const t0 = performance.now();
        current.kill('SIGKILL');
        latency.push((await shown) - t0);
        await killed(current);
        // A new worker answers for the run: the hint is the wait for its approval again.
        const back = frames.next(hint('waiting'));
        current = worker();
        await back;
        await sleep(500 + (i % 5) * 73); // not in step with the console's 100 ms tick
      }
    } finally {
      frames.stop();
      await handle.terminate('bench done');
    }
  } finally {
    current.kill('SIGTERM');
    await killed(current);
    await app.close();
    await env.teardown();
  }
  figure('no_worker hint: a worker SIGKILLed to the hint on a connected client (max is the figure to read)', 'ms', latency, {
    op: '<=',
    limit: 2000,
  });
}

/** How many canonical runs the servers section starts at once. */
const AT_ONCE = 3;

/**
 * The dev server beside a cluster (PostgreSQL, SQL visibility; scripts/support/servers.ts), each
 * fresh, in one run: canonical runs per minute (AT_ONCE at a time), read-only steps per second of
 * one run, and the time from a SIGKILLed server's frontend answering again to the next step it
 * records as completed. The cluster is skipped, saying so, when its binaries are not built.
 */
async function benchServers(o: BenchOptions, settings: Settings): Promise<void> {
  for (const kind of ['dev', 'cluster'] as ServerKind[]) {
    if (kind === 'cluster' && !clusterBuilt()) {
      process.stderr.write(`the cluster: skipped (no binaries in ${CLUSTER_BIN}; run scripts/ensure-cluster.sh build)\n`);
      continue;
    }
    process.stderr.write(`the ${kind} server: throughput and a restart\n`);
    const server = await startBackend(kind);
    const worker = { stateDir: tempDir(`bench-${kind}`), docker: false as const, settings: { ...settings, allowLocal: true } };
    await onWorker(
      `servers-${kind}`,
      worker,
      async (rig) => {
        await rig.finish(replayInput([STOP])); // warm-up
        const perMinute: number[] = [];
        const perSecond: number[] = [];
        const recovery: number[] = [];
        const long = replayInput([...Array.from({ length: READS }, (_, i) => read(i)), STOP]);
        for (let r = 0; r < o.repeats; r++) {
          const batch = await timed(() => Promise.all(Array.from({ length: AT_ONCE }, () => rig.finish(canonicalInput('canonical')))));
          for (const run of batch.value)
            if (run.outcome.record.status !== 'completed')
              throw new Error(`a canonical run on the ${kind} server ended ${run.outcome.record.status}`);
          perMinute.push((AT_ONCE * 60_000) / batch.ms);
          perSecond.push(READS / ((await rig.finish(long)).ms / 1000));
          recovery.push(await restartToStep(server, rig));
        }
        figure(`canonical runs per minute, ${AT_ONCE} at a time (${kind})`, 'runs/min', perMinute);
        figure(`read-only steps per second, one run of ${READS} (${kind})`, 'steps/s', perSecond);
        figure(`server SIGKILLed mid-run and started again: its frontend answering to the next completed step (${kind})`, 'ms', recovery);
      },
      () => environmentOf(server),
    );
  }
}

/**
 * A run of test runs (each a regular activity) whose server is SIGKILLed after its first test
 * run and started again: the time from the frontend answering again to the first activity the
 * server records as completed after it (history event times, the same machine's clock).
 */
async function restartToStep(server: ServerUnderTest, rig: Rig): Promise<number> {
  // Enough test runs that some are still to come once the server answers again.
  const tests = Array.from({ length: 20 }, (_, i) => ({
    kind: 'tool',
    call: { call_id: `tests-${i}`, name: 'run_tests', arguments: { preset: 'candidate_tests' } },
  }));
  const handle = await rig.start(replayInput([...tests, STOP]));
  const completed = async () => ((await handle.fetchHistory()).events ?? []).filter((e) => e.activityTaskCompletedEventAttributes);
  for (let i = 0; (await completed()).length === 0; i++) {
    if (i > 600) throw new Error(`bench run ${handle.workflowId}: no test run completed in 60 s`);
    await new Promise((r) => setTimeout(r, 100));
  }
  await server.kill();
  await server.start();
  const back = Date.now();
  await runOutcome(handle, null);
  const after = (await completed()).map(eventMs).find((t) => t > back);
  if (after === undefined) throw new Error(`bench run ${handle.workflowId}: no activity completed after the server answered again`);
  return after - back;
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
