/**
 * Worker Versioning (docs/versioning.md) with two real builds on a real dev server: build A (this
 * build) and build B (a copy of it whose agentRun takes a timer first, so no history of A replays
 * on it). Runs parked on a write's approval on A stay on A while B becomes current, new runs start
 * on B, a long session moves to B at its continue-as-new, and A's worker exits once its version
 * has drained. Every version is read back with the `temporal` CLI.
 *
 * The rollout runs on the dev server and on a PostgreSQL cluster of its own (scripts/ensure-cluster.sh,
 * in a temp folder on free loopback ports); the embedded default's background worker on the dev server.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { cpSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { WorkflowHandle } from '@temporalio/client';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode, Worker } from '@temporalio/worker';
import { DeterminismViolationError } from '@temporalio/workflow';
import { approvalFor, sendApproval, startRun } from '../client/run-access';
import type { RunOutcome } from '../core/run-view';
import { stopWorker as stopBackground } from '../host/background-worker';
import { buildId } from '../host/build';
import { processAlive, processEnded } from '../host/processes';
import { temporalBinary } from '../host/temporal-bin';
import { LINKCHECK, PROJECT_ROOT, SETTINGS, tempDir } from '../scripts/support/run-dir';
import { describeVersion } from '../worker/deployment';
import { quietLogger, sharedWorkflowModules, WORKFLOW_BUNDLES } from '../worker';
import { clusterEnvironment, type ServerKind } from '../scripts/support/servers';
import { killed, pendingApproval, startServer, traceIn, uniqueQueue, waitFor, writeReplay } from './helpers/temporal';

const exec = promisify(execFile);
/**
 * A long session continues as new past this many events: a run of one write has fewer at the top
 * of its last turn (about 45; it ends with 65), the session more after its tests (see `replay`).
 */
const SUGGEST_CAN_EVENTS = 60;
const DEPLOYMENT = 'versioning-suite';
/** Continue-as-new suggested from SUGGEST_CAN_EVENTS; a version's drainage seen in seconds (the dev server's default). */
const DYNAMIC_CONFIG = {
  'limit.historyCount.suggestContinueAsNew': SUGGEST_CAN_EVENTS,
  'matching.wv.VersionDrainageStatusRefreshInterval': '5s',
  'matching.wv.VersionDrainageStatusVisibilityGracePeriod': '5s',
};

/** The server of the `describe` block now running. */
let env: TestWorkflowEnvironment;
/** Build B, made once for the file. */
let b: { root: string; bundle: string };
beforeAll(async () => {
  b = await buildB();
});

/** Each block's server: the dev server, or a cluster of its own with the same configuration. */
function onServer(kind: ServerKind): void {
  beforeAll(async () => {
    env =
      kind === 'dev'
        ? await startServer(['--dynamic-config-value', `limit.historyCount.suggestContinueAsNew=${SUGGEST_CAN_EVENTS}`])
        : await clusterEnvironment(DYNAMIC_CONFIG);
  }, 180_000);
  afterAll(async () => {
    await env?.teardown();
  });
}

/** Build B: this build's compiled tree with the test-only workflows of helpers/versioning-workflows bundled in. */
async function buildB(): Promise<{ root: string; bundle: string }> {
  const root = tempDir('build-b');
  const dist = join(root, 'dist');
  cpSync(join(PROJECT_ROOT, 'dist'), dist, { recursive: true, filter: (src) => !src.startsWith(join(PROJECT_ROOT, 'dist', 'tests')) });
  cpSync(join(PROJECT_ROOT, 'package.json'), join(root, 'package.json'));
  symlinkSync(join(PROJECT_ROOT, 'node_modules'), join(root, 'node_modules'));
  const { code } = await bundleWorkflowCode({
    workflowsPath: require.resolve('./helpers/versioning-workflows'),
    preloadModules: sharedWorkflowModules(),
    logger: quietLogger,
  });
  // Both of the build's bundles: a worker takes one or the other by whether it exports traces.
  for (const kind of ['plain', 'traced'] as const)
    writeFileSync(join(dist, WORKFLOW_BUNDLES[kind].slice(join(PROJECT_ROOT, 'dist').length + 1)), code);
  return { root, bundle: code };
}

interface WorkerProcess {
  child: ChildProcess;
  stderr: () => string;
}

/** The environment of a worker of either build. */
const workerEnv = (taskQueue: string, stateDir: string, deployment: string): NodeJS.ProcessEnv => ({
  ...process.env,
  TEMPORAL_ADDRESS: env.address,
  AGENT_TASK_QUEUE: taskQueue,
  AGENT_STATE_DIR: stateDir,
  AGENT_DEPLOYMENT_NAME: deployment,
  AGENT_DRAIN_CHECK_S: '1',
  AGENT_ALLOW_LOCAL: '1',
  // Build B's copy has no tools environment of its own.
  AGENT_TOOLS_DIR: SETTINGS.toolsDir,
});

/** A real worker process of the build in `root` (this checkout, or build B's copy). */
function startWorker(root: string, taskQueue: string, stateDir: string): WorkerProcess {
  const child = spawn(process.execPath, [join(root, 'dist', 'worker', 'main.js')], {
    env: workerEnv(taskQueue, stateDir, DEPLOYMENT),
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let text = '';
  child.stderr!.on('data', (chunk: Buffer) => (text += chunk.toString()));
  return { child, stderr: () => text };
}

async function stopWorker(w: WorkerProcess): Promise<void> {
  if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill('SIGTERM');
  await killed(w.child);
}

/** The build id a worker process reports on its first line. */
const reportedBuild = (w: WorkerProcess) => waitFor('the worker to poll', async () => /build (\S+);/.exec(w.stderr())?.[1]);

/** Waits until the server names `build` the deployment's current version. */
const currentIs = (build: string, deploymentName = DEPLOYMENT) =>
  waitFor(`version ${build} current`, async () => {
    const view = await describeVersion(env.nativeConnection, 'default', { deploymentName, buildId: build });
    return view.status === 'CURRENT';
  });

const temporal = async (args: string[]) =>
  JSON.parse((await exec(temporalBinary(SETTINGS), [...args, '--address', env.address, '-o', 'json'])).stdout) as Record<string, any>;

/** The version a run (its latest, or `runId`) is on, as `temporal workflow describe` shows it. */
async function versionOf(workflowId: string, runId?: string): Promise<{ behavior: string; build: string }> {
  const described = await temporal(['workflow', 'describe', '-w', workflowId, ...(runId ? ['-r', runId] : [])]);
  const info = described.workflowExecutionInfo.versioningInfo;
  return { behavior: info.behavior, build: info.deploymentVersion?.buildId };
}

/**
 * A run of one write: read the checker, fix it (which asks for an approval), then `final`; a long
 * session runs the tests `tests` times after the fix. Reads are local activities, run in one
 * workflow task; each test run is an activity of its own, so the session's history grows past
 * SUGGEST_CAN_EVENTS and Temporal suggests continue-as-new at the top of a turn.
 */
function replay(tests = 0): string {
  const canonical = JSON.parse(readFileSync(join(LINKCHECK, 'replays', 'canonical.json'), 'utf8')) as {
    decisions: { kind: string; call?: { call_id: string } }[];
  };
  const step = (id: string) => canonical.decisions.find((d) => d.call?.call_id === id)!;
  const test = (i: number) => ({
    kind: 'tool',
    call: { call_id: `tests-${i}`, name: 'run_tests', arguments: { preset: 'candidate_tests' } },
  });
  return writeReplay([
    step('read-source'),
    step('fix-source'),
    ...Array.from({ length: tests }, (_, i) => test(i)),
    canonical.decisions[canonical.decisions.length - 1],
  ]);
}

const input = (path: string) => ({
  fixture: LINKCHECK,
  source: { kind: 'replay' as const, path, trusted: true },
  backend: 'local' as const,
  approver: 'interactive',
});

async function approvePending(handle: WorkflowHandle): Promise<void> {
  const pending = await pendingApproval(handle);
  await sendApproval(handle, approvalFor(pending, 'approve', 'user:test'));
}

describe.each<ServerKind>(['dev', 'cluster'])('on the %s server', (kind) => {
  onServer(kind);
  it('keeps parked runs on the build that started them, starts new ones on the new build, and drains the old worker', async () => {
    const taskQueue = uniqueQueue('versioning');
    const stateDir = tempDir('agent-state');
    mkdirSync(stateDir, { recursive: true });
    const buildA = buildId();
    const workerA = startWorker(PROJECT_ROOT, taskQueue, stateDir);
    let workerB: WorkerProcess | null = null;
    try {
      expect(await reportedBuild(workerA)).toBe(buildA);
      await currentIs(buildA);

      // Four runs park on their write's approval on A; a fifth, a long session, too.
      const parked = await Promise.all(
        [0, 1, 2, 3].map((i) => startRun(env.client, input(replay()), { taskQueue, workflowId: `${taskQueue}-parked-${i}` })),
      );
      const session = await startRun(env.client, input(replay(4)), { taskQueue, workflowId: `${taskQueue}-session` });
      const waiting = await Promise.all([...parked, session].map((h) => pendingApproval(h)));

      // Build B: a workflow change no history of A replays on.
      const { root, bundle } = b;
      const history = await parked[0].fetchHistory();
      await expect(Worker.runReplayHistory({ workflowBundle: { code: bundle } }, history, parked[0].workflowId)).rejects.toThrow(
        DeterminismViolationError,
      );
      await Worker.runReplayHistory({ workflowBundle: { codePath: WORKFLOW_BUNDLES.plain } }, history, parked[0].workflowId);

      workerB = startWorker(root, taskQueue, stateDir);
      const buildNew = await reportedBuild(workerB);
      expect(buildNew).not.toBe(buildA);
      await currentIs(buildNew);

      // New runs go to B; every parked run is approved and finishes on A.
      const fresh = await Promise.all(
        [0, 1].map((i) => startRun(env.client, input(replay()), { taskQueue, workflowId: `${taskQueue}-new-${i}` })),
      );
      await Promise.all(fresh.map((h) => pendingApproval(h)));
      for (const [i, handle] of [...parked, session].entries()) await sendApproval(handle, approvalFor(waiting[i], 'approve', 'user:test'));
      await Promise.all(fresh.map(approvePending));
      const outcomes = (await Promise.all([...parked, session, ...fresh].map((h) => h.result()))) as RunOutcome[];
      for (const outcome of outcomes) expect(outcome.record).toMatchObject({ status: 'completed', reason: null, writes: 1, receipts: 1 });
      // The builds each run's steps saw, as its state records them.
      expect(outcomes.map((o) => o.state.builds)).toEqual([
        ...parked.map(() => [buildA]),
        [buildA, buildNew],
        ...fresh.map(() => [buildNew]),
      ]);

      const pinned = (build: string) => ({ behavior: 'VERSIONING_BEHAVIOR_PINNED', build });
      for (const handle of parked) expect(await versionOf(handle.workflowId)).toEqual(pinned(buildA));
      for (const handle of fresh) expect(await versionOf(handle.workflowId)).toEqual(pinned(buildNew));
      // The long session's first segment ran on A; after its approval it continued as new onto B.
      expect(await versionOf(session.workflowId, session.firstExecutionRunId)).toEqual(pinned(buildA));
      expect(await versionOf(session.workflowId)).toEqual(pinned(buildNew));
      const continued = traceIn(stateDir, session.firstExecutionRunId).filter((e) => e.type === 'continued_as_new');
      expect(continued.map((e) => (e.data as { to_current_version: boolean }).to_current_version)).toEqual([true]);

      // A's version has no open run left: its worker exits by itself; B's keeps polling.
      await waitFor('worker A to exit', async () => workerA.child.exitCode !== null, 60_000);
      expect(workerA.child.exitCode).toBe(0);
      expect(workerA.stderr()).toMatch(`version ${DEPLOYMENT}.${buildA} has drained`);
      expect(workerB.child.exitCode).toBeNull();
      const described = await temporal(['worker', 'deployment', 'describe-version', '--deployment-name', DEPLOYMENT, '--build-id', buildA]);
      expect(described.drainageInfo.drainageStatus).toBe('drained');
      const deployment = await temporal(['worker', 'deployment', 'describe', '--name', DEPLOYMENT]);
      expect(deployment.routingConfig.currentVersionBuildID).toBe(buildNew);
    } finally {
      await stopWorker(workerA);
      if (workerB) await stopWorker(workerB);
    }
    // Unpinned, a parked run would replay on B and fail its workflow task until this ends the test.
  }, 120_000);
});

describe('the embedded default', () => {
  onServer('dev');
  it("leaves the embedded default's background worker of the old build running after a rebuild until its runs have ended", async () => {
    const taskQueue = uniqueQueue('background');
    const stateDir = tempDir('agent-state');
    const deployment = 'versioning-background';
    const workers = workerEnv(taskQueue, stateDir, deployment);
    const buildA = buildId();
    // Each build's command line ensures the background worker with its own modules, as `npm run agent` does.
    const ensure = async (root: string) => {
      const { ensureBackgroundWorker } = require(
        join(root, 'dist', 'host', 'background-worker.js'),
      ) as typeof import('../host/background-worker');
      const { readSettings } = require(join(root, 'dist', 'host', 'settings.js')) as typeof import('../host/settings');
      return ensureBackgroundWorker(readSettings(workers), workers);
    };
    const first = await ensure(PROJECT_ROOT);
    let second: Awaited<ReturnType<typeof ensure>> | null = null;
    try {
      expect(first).toMatchObject({ action: 'started', record: { build: buildA } });
      await currentIs(buildA, deployment);
      const old = await startRun(env.client, input(replay()), { taskQueue, workflowId: `${taskQueue}-old` });
      const waiting = await pendingApproval(old);

      second = await ensure(b.root);
      const buildNew = second.record.build;
      expect(second).toMatchObject({ action: 'replaced', why: `it runs build ${buildA}, this is ${buildNew}` });
      await currentIs(buildNew, deployment);
      const log = () => readFileSync(join(stateDir, 'worker.log'), 'utf8');
      await waitFor('the old worker to say it drains', async () =>
        log().includes(
          `worker ${first.record.pid}: replaced by worker ${second!.record.pid} of build ${buildNew}; serving the runs pinned to build ${buildA} until its version drains`,
        ),
      );
      expect(processAlive(first.record)).toBe(true);

      const fresh = await startRun(env.client, input(replay()), { taskQueue, workflowId: `${taskQueue}-new` });
      await sendApproval(old, approvalFor(waiting, 'approve', 'user:test'));
      await approvePending(fresh);
      for (const handle of [old, fresh])
        expect(((await handle.result()) as RunOutcome).record).toMatchObject({ status: 'completed', writes: 1 });
      expect(await versionOf(old.workflowId)).toEqual({ behavior: 'VERSIONING_BEHAVIOR_PINNED', build: buildA });
      expect(await versionOf(fresh.workflowId)).toEqual({ behavior: 'VERSIONING_BEHAVIOR_PINNED', build: buildNew });

      expect(await processEnded(first.record, 60_000)).toBe(true);
      expect(log()).toContain(`worker ${first.record.pid}: version ${deployment}.${buildA} has drained`);
      expect(processAlive(second.record)).toBe(true);
    } finally {
      await stopBackground(first.record);
      if (second) await stopBackground(second.record);
    }
  }, 120_000);
});
