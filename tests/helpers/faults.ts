/**
 * Helpers for tests that kill real worker processes: a worker handle that knows how it ended,
 * the ledger as the host sees it, the end state every crash case must reach, and a look at the
 * history to say where a kill landed.
 */
import { execFileSync, type ChildProcess } from 'node:child_process';
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { sha256 } from '../../host/digest';
import type { FaultPoint } from '../../host/faults';
import { Ledger, type Receipt } from '../../store/ledger';
import { runPaths } from '../../workspace/workspace';
import { LINKCHECK, tempDir } from './run-dir';
import { spawnWorker } from './temporal';
import type { RunOutcome } from '../../core/run-view';

export interface ExitStatus {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface WorkerProcess {
  child: ChildProcess;
  /** Resolves once the worker polls its task queue (it says so on stderr). */
  ready: Promise<void>;
  /** Resolves when the process has ended, with its exit code or the signal that ended it. */
  exit: Promise<ExitStatus>;
  /** What the worker wrote on stderr, for failure messages. */
  log(): string;
  /** SIGTERM (a clean shutdown) and wait for the end. */
  stop(): Promise<ExitStatus>;
}

/**
 * A real worker process (`node dist/worker/main.js`), optionally with AGENT_FAULT set; `extraEnv`
 * goes last (a TEMPORAL_ADDRESS there connects the worker through a proxy).
 */
export function startWorker(
  env: Pick<TestWorkflowEnvironment, 'address'>,
  taskQueue: string,
  stateDir: string,
  fault?: FaultPoint,
  extraEnv: Record<string, string> = {},
): WorkerProcess {
  const child = spawnWorker(env, taskQueue, stateDir, { ...(fault ? { AGENT_FAULT: fault } : {}), ...extraEnv });
  let log = '';
  const exit = new Promise<ExitStatus>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  const ready = new Promise<void>((resolve, reject) => {
    // Reading stderr also keeps the pipe from filling up and blocking the worker.
    child.stderr?.on('data', (chunk: Buffer) => {
      log = (log + chunk.toString('utf8')).slice(-20_000);
      if (log.includes('worker polling task queue')) resolve();
    });
    void exit.then((s) => reject(new Error(`worker exited (${s.signal ?? s.code}) before polling:\n${log}`)));
  });
  ready.catch(() => undefined); // a test that never waits for readiness must not see an unhandled rejection
  return {
    child,
    ready,
    exit,
    log: () => log,
    stop: () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      return exit;
    },
  };
}

/** The worker's end, or a failure with its log when it does not end within `ms`. */
export async function deathOf(worker: WorkerProcess, ms = 60_000): Promise<ExitStatus> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`worker did not die within ${ms} ms:\n${worker.log()}`)), ms);
  });
  try {
    return await Promise.race([worker.exit, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Opens the host ledger the way recovery does, runs `read` on it, and closes it again. */
export function withLedger<T>(stateDir: string, read: (ledger: Ledger) => T): T {
  const ledger = new Ledger(join(stateDir, 'ledger.sqlite'));
  try {
    return read(ledger);
  } finally {
    ledger.close();
  }
}

export function ledgerReceipts(stateDir: string, runId: string): Receipt[] {
  return withLedger(stateDir, (ledger) => ledger.receipts(runId));
}

export const workspaceOf = (stateDir: string, runId: string) => runPaths(stateDir, runId).workspace;

/** Digest of a workspace file, 'absent' when there is none (the ledger's word for it). */
export function fileDigest(path: string): string {
  try {
    return sha256(readFileSync(path));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 'absent';
    throw err;
  }
}

/** What every crash case must end with, in the record and in the ledger; returns both. */
export function finishedState(outcome: RunOutcome, stateDir: string, runId: string) {
  const receipts = ledgerReceipts(stateDir, runId);
  const workspace = workspaceOf(stateDir, runId);
  return {
    status: outcome.record.status,
    writes: outcome.record.writes,
    receipts: outcome.record.receipts,
    ledger_receipts: receipts.length,
    /** Receipts whose `after` digest the workspace file does not have. */
    digest_mismatches: receipts.filter((r) => fileDigest(join(workspace, r.path)) !== r.after).map((r) => r.path),
  };
}

export const CLEAN_FINISH = { status: 'completed', writes: 2, receipts: 2, ledger_receipts: 2, digest_mismatches: [] };

/** Command lines of running processes exactly equal to `args` (for example `sleep 4242.5`). */
export function processesRunning(args: string): string[] {
  return execFileSync('ps', ['-eo', 'args'], { encoding: 'utf8' })
    .split('\n')
    .filter((line) => line.trim() === args);
}

/**
 * A copy of the linkcheck fixture whose test suite starts `sleep <marker>` in the background at
 * collection, so every candidate-test run has a recognisable long-lived child in its process group.
 * Collection comes before pytest prints anything: a test run whose worker (the reader of its
 * output) was killed would die of a broken pipe at its first progress line.
 */
export function fixtureWithSleepingChild(marker: string): string {
  const dir = join(tempDir('agent-fixture'), 'linkcheck-sleeper');
  cpSync(LINKCHECK, dir, { recursive: true });
  writeFileSync(
    join(dir, 'repo', 'tests', 'conftest.py'),
    `import subprocess

subprocess.Popen(["sleep", "${marker}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
`,
  );
  return dir;
}

/**
 * Attempt numbers of each started activity, by activity type, from the run's history; a local
 * activity (read-only steps) counts from its marker, under its own type (`localDecide`, `localTool`).
 */
export async function activityAttempts(handle: WorkflowHandle): Promise<{ type: string; attempt: number }[]> {
  const history = await handle.fetchHistory();
  const types = new Map<string, string>();
  const started: { type: string; attempt: number }[] = [];
  for (const event of history.events ?? []) {
    const scheduled = event.activityTaskScheduledEventAttributes;
    if (scheduled) types.set(String(event.eventId), scheduled.activityType?.name ?? '?');
    const start = event.activityTaskStartedEventAttributes;
    if (start) started.push({ type: types.get(String(start.scheduledEventId)) ?? '?', attempt: start.attempt ?? 1 });
    const marker = event.markerRecordedEventAttributes;
    if (marker?.markerName === 'core_local_activity') {
      const data = JSON.parse(Buffer.from(marker.details!.data!.payloads![0].data!).toString('utf8')) as {
        activity_type: string;
        attempt: number;
      };
      started.push({ type: data.activity_type, attempt: data.attempt });
    }
  }
  return started;
}

/**
 * Where a run stood when its worker died: the activities in flight (with how many had finished
 * before), or, between activities, the last one that finished.
 */
export async function killPoint(handle: WorkflowHandle): Promise<string> {
  const history = await handle.fetchHistory();
  const types = new Map<string, string>();
  const open = new Set<string>();
  let finished = 0;
  let last = '';
  for (const event of history.events ?? []) {
    if (event.workflowExecutionCompletedEventAttributes || event.workflowExecutionFailedEventAttributes) return 'after the end';
    const scheduled = event.activityTaskScheduledEventAttributes;
    if (scheduled) {
      types.set(String(event.eventId), scheduled.activityType?.name ?? '?');
      open.add(String(event.eventId));
    }
    const done =
      event.activityTaskCompletedEventAttributes ??
      event.activityTaskFailedEventAttributes ??
      event.activityTaskTimedOutEventAttributes ??
      event.activityTaskCanceledEventAttributes;
    if (done) {
      open.delete(String(done.scheduledEventId));
      finished++;
      last = types.get(String(done.scheduledEventId)) ?? '?';
    }
  }
  if (open.size > 0) return `in ${[...open].map((id) => types.get(id)).join('+')} (activity ${finished + 1})`;
  return finished === 0 ? 'before the first activity' : `between activities, after ${last} (activity ${finished})`;
}

/** Waits until process `pid` has ended (it must be a child of this process or already reaped). */
export async function processEnded(pid: number, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  for (;;) {
    try {
      process.kill(pid, 0);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ESRCH') return;
      throw err;
    }
    if (Date.now() > deadline) throw new Error(`process ${pid} still runs after ${ms} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A small seeded generator (mulberry32), so a soak's kill delays can be replayed. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
