/**
 * The history check itself (scripts/support/histories.ts, run by jest's global tear-down over
 * every suite): the histories of a real server, fetched before it stops and named by the test
 * that started each workflow, replay on both workflow bundles; a deliberately non-deterministic
 * change of the workflow code (helpers/versioning-workflows: a timer before agentRun's first step)
 * is caught, naming the workflow and the test; another build's histories and workflow types the
 * bundles do not hold are counted and left out; a server that cannot be read is named. And the
 * tear-down's other job: what a test left running of this run is killed, wherever its parent.
 */
import { spawn } from 'node:child_process';
import { appendFileSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode } from '@temporalio/worker';
import { buildId } from '../host/build';
import { startRun } from '../client/run-access';
import { buildsOf, decodeHistory, encodeHistory, HistorySink, replaySinks, type SinkLine } from '../scripts/support/histories';
import { quietLogger, sharedWorkflowModules, workflowBundle } from '../worker';
import { workerTelemetry } from '../worker/telemetry';
import { killLeftovers } from './helpers/global-teardown';
import { freePort, tempDir } from './helpers/run-dir';
import { canonicalInput, inProcessWorker, pendingApproval, runOnce, startServer, uniqueQueue } from './helpers/temporal';

let env: TestWorkflowEnvironment;
beforeAll(async () => {
  env = await startServer();
});
afterAll(async () => {
  await env?.teardown();
});

const TEST = 'tests/history-check.test.ts › the test that made them';
const sinks = workerTelemetry(null).sinks;

describe('the history check', () => {
  it('replays a server’s histories, open and closed, on both bundles and catches a non-deterministic change, naming the workflow and its test', async () => {
    const completed = await runOnce(env, canonicalInput('canonical'));
    expect(completed.outcome.record.status).toBe('completed');
    // A run left waiting for its approval, its worker gone: open when the server's histories are fetched.
    const taskQueue = uniqueQueue('check');
    const { worker, close } = await inProcessWorker(env, taskQueue, tempDir('agent-state'));
    const open = await startRun(env.client, canonicalInput('canonical', { approver: 'interactive' }), {
      taskQueue,
      workflowId: `${taskQueue}-open`,
    });
    try {
      await worker.runUntil(() => pendingApproval(open));
    } finally {
      close();
    }

    const dir = tempDir('agent-history-check');
    expect(await new HistorySink(join(dir, 'check.ndjson'), () => TEST).collect(env.address)).toBe(2);
    const lines = readFileSync(join(dir, 'check.ndjson'), 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as SinkLine)
      .filter((l) => l.history !== undefined);
    expect(lines.map((l) => [l.workflow_id, l.status]).sort()).toEqual(
      [
        [completed.handle.workflowId, 'COMPLETED'],
        [open.workflowId, 'RUNNING'],
      ].sort(),
    );

    const bundles = {
      traced: { workflowBundle: await workflowBundle('traced'), sinks },
      plain: { workflowBundle: await workflowBundle('plain'), sinks },
    };
    const clean = await replaySinks(dir, bundles, buildId());
    expect({ replayed: clean.replayed, skipped: clean.skipped, failures: clean.failures }).toEqual({
      replayed: 2,
      skipped: {},
      failures: [],
    });

    const changed = await bundleWorkflowCode({
      workflowsPath: require.resolve('./helpers/versioning-workflows'),
      preloadModules: sharedWorkflowModules(),
      logger: quietLogger,
    });
    const caught = await replaySinks(dir, { changed: { workflowBundle: { code: changed.code }, sinks } }, buildId());
    expect(
      caught.failures
        .map((f) => ({ ...f, error: /Nondeterminism|nondeterminism/.test(f.error) }))
        .sort((a, b) => (a.workflow_id < b.workflow_id ? -1 : 1)),
    ).toEqual(
      [completed.handle.workflowId, open.workflowId].sort().map((workflow_id) => ({
        test: TEST,
        workflow_id,
        run_id: lines.find((l) => l.workflow_id === workflow_id)!.run_id,
        bundle: 'changed',
        error: true,
      })),
    );
  });

  it('leaves out and counts another build’s histories and workflow types the bundles do not hold, and names a server it could not read', async () => {
    const dir = tempDir('agent-history-check');
    const file = join(dir, 'check.ndjson');
    const done = await runOnce(env, canonicalInput('canonical'));
    await new HistorySink(file, () => TEST).collect(env.address);
    const mine = readFileSync(file, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as SinkLine)
      .find((l) => l.workflow_id === done.handle.workflowId)!;
    // The same history as another build's workers completed it, and as a workflow of another type.
    const history = decodeHistory(mine);
    expect(buildsOf(history)).toEqual(new Set([buildId()]));
    for (const e of history.events)
      if (e.workflowTaskCompletedEventAttributes?.deploymentVersion)
        e.workflowTaskCompletedEventAttributes.deploymentVersion.buildId = '0.0.0+another';
    const otherBuild: SinkLine = { ...mine, history: encodeHistory(history) };
    appendFileSync(file, `${JSON.stringify(otherBuild)}\n${JSON.stringify({ ...mine, type: 'someoneElsesWorkflow' })}\n`);
    const closed = `127.0.0.1:${await freePort()}`;
    await new HistorySink(file, () => TEST).collect(closed);

    const report = await replaySinks(dir, { plain: { workflowBundle: await workflowBundle('plain'), sinks } }, buildId());
    expect(report.skipped).toEqual({ 'histories of another build': 1, 'workflow types the bundles do not hold': 1 });
    expect(report.failures).toEqual([]);
    expect(report.replayed).toBe(report.histories - 2);
    expect(report.unreachable).toEqual([expect.stringContaining(`${closed} (${TEST})`)]);
  });
});

describe('the global tear-down', () => {
  it('kills the project’s processes this run left running, found by its history folder, and no other run’s', async () => {
    // Each stands for a command line a test left running: its arguments name dist/client/cli.js.
    const leftover = (historyDir: string) =>
      spawn(process.execPath, ['-e', 'setTimeout(() => {}, 600000)', 'dist/client/cli.js'], {
        env: { ...process.env, AGENT_TEST_HISTORIES: historyDir },
        stdio: 'ignore',
      });
    const [ours, theirs] = [tempDir('histories-ours'), tempDir('histories-theirs')];
    const mine = leftover(ours);
    const other = leftover(theirs);
    try {
      const ended = new Promise<string | null>((resolve) => {
        mine.once('exit', (_code, signal) => resolve(signal));
        setTimeout(() => resolve('still running after 10 s'), 10_000).unref();
      });
      killLeftovers(ours);
      expect(await ended).toBe('SIGKILL');
      expect(other.exitCode).toBeNull();
      expect(other.signalCode).toBeNull();
    } finally {
      mine.kill('SIGKILL');
      other.kill('SIGKILL');
    }
  });
});
