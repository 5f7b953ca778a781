/**
 * A wedged run is never silent. A run whose first workflow task was completed by a deliberately
 * different agentRun (helpers/versioning-workflows: a timer before its first step, on a worker that
 * names another build) is then served by a real worker process of this build, whose replay fails
 * the task on nondeterminism again and again. `status`, the event stream (its `no_worker` hint)
 * and an action on the console's API each say the run is wedged, naming the run, the failing
 * worker's build and the error (docs/failures.md says what an operator does then).
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode, Worker } from '@temporalio/worker';
import { startConsole, type RunningConsole } from '../client/console/server';
import { startRun, wedgedTask, runHandle } from '../client/run-access';
import { buildId } from '../host/build';
import { quietLogger, sharedWorkflowModules } from '../worker';
import { SseClient } from './helpers/sse';
import { PROJECT_ROOT, tempDir } from './helpers/run-dir';
import { canonicalInput, killed, spawnWorker, startServer, uniqueQueue, waitFor } from './helpers/temporal';

const exec = promisify(execFile);
const TOKEN = 'wedged-test-token-0123456789-0123456789';

let env: TestWorkflowEnvironment;
let app: RunningConsole;
beforeAll(async () => {
  env = await startServer();
  app = await startConsole({
    client: env.client,
    token: 'wedged-test-console-token',
    host: '127.0.0.1',
    port: 0,
    webUi: null,
    namespace: 'default',
    apiTokens: new Map([['bot', TOKEN]]),
  });
});
afterAll(async () => {
  await app?.close();
  await env?.teardown();
});

describe('a run whose workflow task fails on nondeterminism', () => {
  it('is named wedged, with its build and the error, by status, by its event stream and by an action on the console', async () => {
    const taskQueue = uniqueQueue('wedged');
    const stateDir = tempDir('agent-wedged');
    const workflowId = `${taskQueue}-run`;
    // Its first workflow task completed by other code, on a worker that says it is of another build.
    const { code } = await bundleWorkflowCode({
      workflowsPath: require.resolve('./helpers/versioning-workflows'),
      preloadModules: sharedWorkflowModules(),
      logger: quietLogger,
    });
    const other = await Worker.create({
      connection: env.nativeConnection,
      taskQueue,
      workflowBundle: { code },
      identity: `${process.pid}@test build 0.0.0+another`,
    });
    const handle = await startRun(env.client, canonicalInput('canonical', { approver: 'interactive' }), { taskQueue, workflowId });
    await other.runUntil(() =>
      waitFor('its first workflow task completed', async () =>
        (await handle.fetchHistory()).events?.some((e) => e.workflowTaskCompletedEventAttributes),
      ),
    );

    // A worker of this build takes it over: its replay of that task fails, every time.
    const worker = spawnWorker(env, taskQueue, stateDir);
    worker.stderr?.resume();
    try {
      const wedged = await waitFor('the run wedged', () => wedgedTask(runHandle(env.client, workflowId)));
      expect(wedged).toMatchObject({ nondeterminism: true, build: buildId() });
      expect(wedged.error).toContain('[TMPRL1100] Nondeterminism error');

      const status = await exec(process.execPath, [join(PROJECT_ROOT, 'dist', 'client', 'cli.js'), 'status', workflowId], {
        env: { ...process.env, TEMPORAL_ADDRESS: env.address, AGENT_TASK_QUEUE: taskQueue, AGENT_STATE_DIR: stateDir },
        cwd: PROJECT_ROOT,
      }).then(
        () => null,
        (err: { code: number; stderr: string }) => err,
      );
      expect(status?.code).toBe(1);
      expect(status?.stderr).toContain(`run ${workflowId} is wedged: its workflow task fails on nondeterminism on build ${buildId()}`);
      expect(status?.stderr).toContain('[TMPRL1100] Nondeterminism error');

      const stream = new SseClient(`${app.url}/api/runs/${encodeURIComponent(workflowId)}/events?v=2`, {
        authorization: `Bearer ${TOKEN}`,
      });
      stream.connect();
      try {
        const hint = await stream.waitFor('a no_worker hint naming the wedge', (f) => f.event === 'hint' && f.data.wedged !== undefined);
        expect(hint.data).toMatchObject({ hint: 'no_worker', wedged: { nondeterminism: true, build: buildId() } });
        expect(hint.data.wedged.error).toContain('[TMPRL1100] Nondeterminism error');
      } finally {
        stream.cut();
      }

      const digest = 'a'.repeat(64);
      const res = await fetch(`${app.url}/api/runs/${encodeURIComponent(workflowId)}/actions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` },
        body: JSON.stringify({ id: 'wedged-1', action: 'approve', action_id: digest, args_digest: digest, workspace_digest: digest }),
      });
      expect(res.status).toBe(409);
      expect(((await res.json()) as { error: string }).error).toContain(
        `run ${workflowId} is wedged: its workflow task fails on nondeterminism on build ${buildId()}`,
      );
    } finally {
      worker.kill('SIGTERM');
      await killed(worker);
      await handle.terminate('the test is over');
    }
  });
});
