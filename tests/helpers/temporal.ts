/** A real Temporal dev server for workflow tests, and helpers to drive runs through it. */
import { spawn, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { openStore, storedTrace } from '../../client/stored-trace';
import { BUILD_PROMPTS_DIR, readSettings } from '../../host/settings';
import { startDevServer } from '../../host/temporal-server';
import { loadPrompt } from '../../models/prompt';
import type { Decision, RunInput, ToolResult } from '../../core/contracts';
import type { TraceEvent } from '../../core/trace';
import type { Limits } from '../../core/limits';
import type { Settings } from '../../host/settings';
import { createWorker } from '../../worker';
import { installRuntime } from '../../host/runtime';
import type { SandboxOptions } from '../../worker/sandbox';
import { freePort, LINKCHECK, PROJECT_ROOT, tempDir, SETTINGS } from './run-dir';
import { queryState, sendApproval, startRunWithArgs, traceSince } from '../../client/run-access';
import type { RunOutcome } from '../../core/run-view';
import { temporalBinary } from '../../host/temporal-bin';

let runtimeInstalled = false;

/**
 * A real Temporal dev server for one test file, started by the project's one launcher (in memory,
 * no Web UI); `teardown()` stops the server too. `extraArgs` go to `temporal server start-dev`,
 * e.g. dynamic configuration values.
 */
export async function startServer(extraArgs: string[] = []): Promise<TestWorkflowEnvironment> {
  if (!runtimeInstalled) {
    installRuntime('WARN');
    runtimeInstalled = true;
  }
  const server = await startDevServer({
    temporal: temporalBinary(SETTINGS),
    stateDir: tempDir('temporal'),
    port: await freePort(),
    uiPort: null,
    dbFile: null,
    attached: true,
    extraArgs,
  });
  try {
    const env = await TestWorkflowEnvironment.createFromExistingServer({ address: server.address });
    const teardown = env.teardown.bind(env);
    env.teardown = async () => {
      try {
        await teardown();
      } finally {
        server.stop();
        await server.exited;
      }
    };
    return env;
  } catch (err) {
    server.stop();
    throw err;
  }
}

let queues = 0;
export const uniqueQueue = (name: string) => `${name}-${process.pid}-${++queues}`;

export function canonicalInput(replay: string, overrides: Partial<RunInput> = {}): RunInput {
  return {
    fixture: LINKCHECK,
    source: { kind: 'replay', path: join(LINKCHECK, 'replays', `${replay}.json`), trusted: true },
    backend: 'local',
    approver: 'policy:approve-writable',
    ...overrides,
  };
}

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
  trace_id: null,
};

/** The prompt version a live run takes by default (the build's newest) and the digest of its content. */
export const CURRENT_PROMPT = loadPrompt(BUILD_PROMPTS_DIR).ref;

/** A replay file in a temp folder (trusted by the caller's input). */
export function writeReplay(decisions: unknown[]): string {
  const file = join(tempDir('replay'), 'scripted.json');
  writeFileSync(file, JSON.stringify({ schema_version: 1, decisions }));
  return file;
}

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

/** Approves every pending action through the real `approval` Signal until the run closes. */
export async function approveAll(handle: WorkflowHandle, principal = 'user:test'): Promise<number> {
  let approved = 0;
  let last: string | undefined;
  while ((await handle.describe()).status.name === 'RUNNING') {
    const view = await queryState(handle).catch(() => null);
    const next = view?.status === 'awaiting_approval' ? view.pending_approval : null;
    if (next && next.action_id !== last) {
      await sendApproval(handle, {
        action_id: next.action_id,
        decision: 'approve',
        args_digest: next.args_digest,
        workspace_digest: next.workspace_digest,
        principal,
      });
      last = next.action_id;
      approved++;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  return approved;
}

/** The events a running run holds in memory. */
export const traceOf = async (handle: WorkflowHandle) => (await traceSince(handle)).events;

/** A real worker process (`node dist/worker/main.js`), for tests that kill it. */
export function spawnWorker(
  env: TestWorkflowEnvironment,
  taskQueue: string,
  stateDir: string,
  extraEnv: Record<string, string> = {},
): ChildProcess {
  return spawn(process.execPath, [join(PROJECT_ROOT, 'dist', 'worker', 'main.js')], {
    env: { ...process.env, TEMPORAL_ADDRESS: env.address, AGENT_TASK_QUEUE: taskQueue, AGENT_STATE_DIR: stateDir, ...extraEnv },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
}

export function killed(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', () => resolve());
  });
}
