/**
 * A real Temporal dev server, and what drives runs through it from outside a worker: inputs of the
 * canonical fixture, scripted replays, approvals through the real Signal, worker processes. Shared
 * by the test suites (tests/helpers/temporal.ts) and the scripts (bench, histories, batch bench).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { CLOSE_SAFE_CALLS } from '../../host/connection';
import type { RunInput } from '../../core/contracts';
import { startDevServer } from '../../host/temporal-server';
import { WORKER_NODE_ARGS, workerProcessEnv } from '../../host/worker-launch';
import { installRuntime } from '../../host/runtime';
import { queryState, approvalFor, sendApproval } from '../../client/run-access';
import { freePort, LINKCHECK, PROJECT_ROOT, SETTINGS, tempDir } from './run-dir';
import { temporalBinary } from '../../host/temporal-bin';
import { collectHistories } from './histories';

let runtimeInstalled = false;

/** The SDK's runtime of a test or bench process, logging warnings and worse (once per process). */
export function quietRuntime(): void {
  if (runtimeInstalled) return;
  installRuntime('WARN');
  runtimeInstalled = true;
}

/**
 * A real Temporal dev server for one test file, started by the project's one launcher (in memory,
 * no Web UI); `teardown()` stops the server too, its workflow histories collected first when a
 * sink is set (./histories.ts). `extraArgs` go to `temporal server start-dev`, e.g. dynamic
 * configuration values.
 */
export async function startServer(extraArgs: string[] = []): Promise<TestWorkflowEnvironment> {
  quietRuntime();
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
    const env = await testEnvironment(server.address);
    const teardown = env.teardown.bind(env);
    env.teardown = async () => {
      try {
        await collectHistories(server.address);
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

/** A test environment (a client and a native connection) on the server at `address`; its client's retries are safe to close under. */
export const testEnvironment = (address: string) =>
  TestWorkflowEnvironment.createFromExistingServer({ address, plugins: [CLOSE_SAFE_CALLS] });

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

/** A replay file in a temp folder (trusted by the caller's input). */
export function writeReplay(decisions: unknown[]): string {
  const file = join(tempDir('replay'), 'scripted.json');
  writeFileSync(file, JSON.stringify({ schema_version: 1, decisions }));
  return file;
}

/** Approves every pending action through the real `approval` Signal until the run closes. */
export async function approveAll(handle: WorkflowHandle, principal = 'user:test'): Promise<number> {
  let approved = 0;
  let last: string | undefined;
  while ((await handle.describe()).status.name === 'RUNNING') {
    const view = await queryState(handle).catch(() => null);
    const next = view?.status === 'awaiting_approval' ? view.pending_approval : null;
    if (next && next.action_id !== last) {
      await sendApproval(handle, approvalFor(next, 'approve', principal));
      last = next.action_id;
      approved++;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  return approved;
}

/** A real worker process (`node dist/worker/main.js`), for tests that kill it. */
export function spawnWorker(
  env: Pick<TestWorkflowEnvironment, 'address'>,
  taskQueue: string,
  stateDir: string,
  extraEnv: Record<string, string> = {},
): ChildProcess {
  return spawn(process.execPath, [...WORKER_NODE_ARGS, join(PROJECT_ROOT, 'dist', 'worker', 'main.js')], {
    env: workerProcessEnv({
      ...process.env,
      TEMPORAL_ADDRESS: env.address,
      AGENT_TASK_QUEUE: taskQueue,
      AGENT_STATE_DIR: stateDir,
      ...extraEnv,
    }),
    stdio: ['ignore', 'ignore', 'pipe'],
  });
}

export function killed(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', () => resolve());
  });
}
