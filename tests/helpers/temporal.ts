/**
 * Helpers of the workflow tests: a run on a fresh in-process worker and what tests check of it.
 * The dev server and the run drivers the scripts use too are in scripts/support/temporal.ts.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { openStore } from '../../store/store';
import { storedTrace } from '../../store/stored-trace';
import { BUILD_PROMPTS_DIR, readSettings } from '../../host/settings';
import { loadPrompt } from '../../models/prompt';
import type { Decision, ToolResult } from '../../core/contracts';
import type { TraceEvent } from '../../core/trace';
import type { Limits } from '../../core/limits';
import type { Settings } from '../../host/settings';
import { createWorker, type WorkerOptions } from '../../worker';
import type { SandboxOptions } from '../../worker/sandbox';
import type { RunOutcome } from '../../core/run-view';
import { tempDir } from '../../scripts/support/run-dir';
import { uniqueQueue } from '../../scripts/support/temporal';
import { queryState, startRunWithArgs, traceSince } from '../../client/run-access';
import { readWorkerRecord, stopWorker } from '../../host/background-worker';
import { collectHistories } from '../../scripts/support/histories';

export {
  approveAll,
  canonicalInput,
  killed,
  spawnWorker,
  startServer,
  testEnvironment,
  uniqueQueue,
  writeReplay,
} from '../../scripts/support/temporal';

/** The record of the canonical replay, completed: the same on every backend and entry point. */
export const CANONICAL_RECORD = {
  fixture: 'linkcheck-nested',
  replay: 'canonical',
  status: 'completed',
  reason: null,
  writes: 2,
  receipts: 2,
  red_observed: true,
  diff_paths: ['src/linkcheck.py', 'tests/test_agent_nested.py'],
  candidate_tests: { discovered: 3, passed: 3, failed: 0 },
  acceptance: { total: 5, passed: 5, failed: [] },
  tool_errors: { tests_failed: 1 },
  turns: 8,
  tool_calls: 6,
  repeated_calls: 0,
  empty_replies: 0,
  unreceipted_changes: 0,
  // Decided by the two tests that passed at the base: both still pass, and the run's own test too.
  verdict: {
    decided_by: 'base',
    base: { passed: 2, failed: 0, error: 0, skipped: 0, xfail: 0 },
    end: { passed: 3, failed: 0, error: 0, skipped: 0, xfail: 0 },
    fixed_tests: [],
    tests_lost: [],
    tests_regressed: [],
    new_tests_failed: [],
    flaky: [],
    fail_to_pass: null,
    pass_to_pass: null,
    verification_tampered: [],
    test_config_changed: [],
  },
  trace_id: null,
};

/** The prompt version a live run takes by default (the build's newest) and the digest of its content. */
export const CURRENT_PROMPT = loadPrompt(BUILD_PROMPTS_DIR).ref;

export interface RunOnceOptions {
  limits?: Partial<Limits>;
  /** Runs on the fresh state folder before the worker opens it. */
  prepareState?: (stateDir: string) => void;
  /** Timeout of one provider HTTP request. */
  modelTimeoutMs?: number;
  docker?: SandboxOptions | false;
  /** The worker's providers file (default: none in the fresh state folder). */
  providersFile?: string;
  /** The worker's prompt versions (default: the build's). */
  promptsDir?: string;
  /** Drives the run while it goes on (signals, watching); `running()` turns false at its end. */
  drive?: (handle: WorkflowHandle, running: () => boolean) => Promise<unknown>;
  /** The worker's settings (default: read from the environment). */
  settings?: Settings;
  /** The run's workflow id (default: made from the queue). */
  workflowId?: string;
  /** Wraps each execution backend of the worker (a test that makes its tests stop heartbeating). */
  wrapBackend?: WorkerOptions['wrapBackend'];
  /** Wraps the worker's activities (to hold a step back while the test sends a message). */
  wrapActivities?: WorkerOptions['wrapActivities'];
}

/** Runs one agentRun on a fresh in-process worker and state folder, and collects what tests check. */
export async function runOnce(env: TestWorkflowEnvironment, input: object, opts: RunOnceOptions = {}) {
  const stateDir = tempDir('agent-state');
  opts.prepareState?.(stateDir);
  const taskQueue = uniqueQueue('run');
  const { worker, ledger, store, close } = await createWorker({
    connection: env.nativeConnection,
    taskQueue,
    stateDir,
    limits: opts.limits,
    docker: opts.docker,
    modelTimeoutMs: opts.modelTimeoutMs,
    providersFile: opts.providersFile,
    wrapBackend: opts.wrapBackend,
    wrapActivities: opts.wrapActivities,
    ...(opts.settings || opts.promptsDir
      ? { settings: { ...(opts.settings ?? readSettings()), ...(opts.promptsDir ? { promptsDir: opts.promptsDir } : {}) } }
      : {}),
  });
  try {
    return await worker.runUntil(async () => {
      const handle = await startRunWithArgs(env.client, [input], { taskQueue, workflowId: opts.workflowId ?? `${taskQueue}-run` });
      let done = false;
      const driven = opts.drive?.(handle, () => !done) ?? Promise.resolve();
      try {
        const outcome = (await handle.result()) as RunOutcome;
        const runId = handle.firstExecutionRunId;
        // The whole trace from the host store, references resolved (as `trace --full` shows it).
        const trace = storedTrace(store, runId, true);
        const transcript = store
          .transcript(outcome.transcript)
          .map((e) =>
            'message' in e
              ? e
              : { decision: store.get<Decision>(e.decision), result: e.result === undefined ? undefined : store.get<ToolResult>(e.result) },
          );
        return {
          handle,
          outcome,
          trace,
          transcript,
          stateDir,
          runId,
          receipts: ledger.receipts(runId),
          ledgerEntries: ledger.entries(runId),
        };
      } finally {
        done = true;
        await driven;
      }
    });
  } finally {
    close();
  }
}

/** The whole stored trace of a run in a state folder, references resolved. */
export function traceIn(stateDir: string, runId: string): TraceEvent[] {
  const store = openStore(stateDir);
  if (store === null) throw new Error('no host store in that state folder');
  try {
    return storedTrace(store, runId, true);
  } finally {
    store.close();
  }
}

export async function inProcessWorker(env: TestWorkflowEnvironment, taskQueue: string, stateDir: string, limits?: Partial<Limits>) {
  return createWorker({ connection: env.nativeConnection, taskQueue, stateDir, limits });
}

export async function waitFor<T>(what: string, probe: () => Promise<T | null | undefined | false>, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe().catch(() => null);
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Waits for the next pending approval and returns it (the run is then awaiting_approval). */
export function pendingApproval(handle: WorkflowHandle, notActionId?: string) {
  return waitFor('a pending approval', async () => {
    const view = await queryState(handle);
    const p = view.status === 'awaiting_approval' ? view.pending_approval : null;
    return p && p.action_id !== notActionId ? p : null;
  });
}

/** The events a running run holds in memory. */
export const traceOf = async (handle: WorkflowHandle) => (await traceSince(handle)).events;

/**
 * Stops what the embedded default started for a state folder (its background worker, its dev
 * server on `port`), the server's workflow histories collected first (scripts/support/histories.ts).
 * `wait`: until the server's process is gone.
 */
export async function stopEmbedded(stateDir: string, port: string | number, o: { wait?: boolean } = {}): Promise<void> {
  const pidFile = join(stateDir, 'temporal-server.pid');
  const serverPid = existsSync(pidFile) ? Number(readFileSync(pidFile, 'utf8')) : null;
  if (serverPid !== null && existsSync(`/proc/${serverPid}`)) await collectHistories(`127.0.0.1:${port}`);
  const worker = readWorkerRecord(stateDir);
  if (worker) await stopWorker(worker);
  if (serverPid === null) return;
  try {
    process.kill(serverPid, 'SIGTERM');
  } catch {
    return; // already gone
  }
  if (o.wait) await waitFor('the dev server to stop', async () => !existsSync(`/proc/${serverPid}`), 15_000);
}
