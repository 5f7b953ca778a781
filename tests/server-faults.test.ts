/**
 * The Temporal server itself dying, its database restarting and the network between a worker
 * and the server cut, with real processes (docs/faults.md): the dev server on a database file
 * and a cluster of the project's (the server built from its Go module, PostgreSQL, SQL
 * visibility; scripts/ensure-cluster.sh), a real worker process, Toxiproxy between them.
 *
 * A worker started with `AGENT_FAULT=<point>` and `AGENT_FAULT_HOLD_MS` holds still at that point
 * and says so: the server is SIGKILLed exactly while a write or a test run is in flight, and
 * started again on the same data once the step has gone on without it. Every run must end
 * completed with one write and one receipt per approved action, its workspace holding what the
 * receipts say, and the worker process that lived through the fault still running.
 *
 * The partition lasts 2 minutes, longer than every activity timeout (10 s): the dev server's and
 * the cluster's are cut at once, and the flapping link's case runs meanwhile on a link of its own,
 * so the suite waits those 2 minutes once. Each SIGKILL is made on both servers at once too.
 */
import { NamespaceNotFoundError } from '@temporalio/common';
import { execFileSync } from 'node:child_process';
import { Client } from '@temporalio/client';
import { startRun } from '../client/run-access';
import { serverAway } from '../client/server-away';
import type { FaultPoint } from '../host/faults';
import { CLEAN_FINISH, startWorker, type WorkerProcess } from './helpers/faults';
import { SETTINGS, tempDir } from './helpers/run-dir';
import { temporalBinary } from '../host/temporal-bin';
import { CaseSteps, endOf, holding, startCanonical } from './helpers/server-faults';
import { networkLink, startBackend, type NetworkLink, type ServerKind, type ServerUnderTest } from '../scripts/support/servers';
import { canonicalInput, uniqueQueue } from './helpers/temporal';

const HOLD_MS = '4000';
/** How long the server stays dead after its SIGKILL: the held step goes on and finishes meanwhile. */
const DOWN_MS = 6000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** One case's worker: a real process on a queue and state folder of its own, stopped by the suite. */
function caseWorker(server: Pick<ServerUnderTest, 'address'>, name: string, point: FaultPoint, extraEnv: Record<string, string> = {}) {
  const stateDir = tempDir('agent-state');
  const taskQueue = uniqueQueue(name);
  const worker = startWorker(server, taskQueue, stateDir, point, { AGENT_FAULT_HOLD_MS: HOLD_MS, ...extraEnv });
  return { stateDir, taskQueue, worker };
}

const alive = (w: WorkerProcess) => [w.child.exitCode, w.child.signalCode];

const KINDS: ServerKind[] = ['dev', 'cluster'];
const servers = new Map<ServerKind, ServerUnderTest>();
const workers: WorkerProcess[] = [];

beforeAll(async () => {
  for (const kind of KINDS) servers.set(kind, await startBackend(kind));
}, 240_000);

afterAll(async () => {
  await Promise.all(workers.map((w) => w.stop()));
  await Promise.all([...servers.values()].map((s) => s.close()));
}, 60_000);

/** What a case on a link of its own has: the link (Toxiproxy), its worker's folder and queue, the worker. */
interface LinkedWorker {
  link: NetworkLink;
  stateDir: string;
  taskQueue: string;
  worker: WorkerProcess;
}

/** Runs `body` with a case's worker on a link of its own to `server`, started and polling; the link closed after it. */
async function onLink<T>(
  server: ServerUnderTest,
  name: string,
  point: FaultPoint,
  step: (what: string) => void,
  body: (c: LinkedWorker) => Promise<T>,
): Promise<T> {
  step('the link starting');
  const link = await networkLink(server.address);
  try {
    const { stateDir, taskQueue, worker } = caseWorker({ address: link.address }, name, point);
    workers.push(worker);
    step('the worker starting');
    await worker.ready;
    return await body({ link, stateDir, taskQueue, worker });
  } finally {
    await link.close();
  }
}

/** The worker cut off from the server's frontend for 2 minutes while its test run is in flight. */
function partitionCase(server: ServerUnderTest, by: number, steps: CaseSteps) {
  const step = (what: string) => steps.step(`partition (${server.kind})`, what);
  return onLink(server, 'partition', 'during_tests', step, async ({ link, stateDir, taskQueue, worker }) => {
    step('the run starting');
    const handle = await startCanonical(server, taskQueue);
    step('waiting for the worker to hold in its test run');
    await holding(worker, 'during_tests');
    step('the link being cut');
    await link.cut();
    step('cut for 2 minutes');
    await sleep(120_000);
    // The run waited for the worker all along: still running, its test run's attempt timed out.
    const during = (await handle.describe()).status.name;
    step('the link healing');
    await link.heal();
    step('waiting for the run to end');
    return { during, end: await endOf(handle, stateDir, worker, by), worker: alive(worker) };
  });
}

/** The worker on a flapping, slow link to the server while its test run is in flight. */
function flappingCase(server: ServerUnderTest, by: number, steps: CaseSteps) {
  const step = (what: string) => steps.step('flapping (dev)', what);
  return onLink(server, 'flapping', 'during_tests', step, async ({ link, stateDir, taskQueue, worker }) => {
    step('the link slowed');
    await link.latency(150, 100);
    step('the run starting');
    const handle = await startCanonical(server, taskQueue);
    step('waiting for the worker to hold in its test run');
    await holding(worker, 'during_tests');
    for (let i = 0; i < 3; i++) {
      step(`cut ${i + 1} of 3`);
      await link.cut();
      await sleep(4000);
      step(`healed ${i + 1} of 3`);
      await link.heal();
      await sleep(2000);
    }
    step('waiting for the run to end');
    return { end: await endOf(handle, stateDir, worker, by), worker: alive(worker) };
  });
}

/**
 * A worker cut off from the server right after it starts polling, while it waits for the server to
 * list its version's queues to make it current: longer than the core's own retries of a call.
 */
function cutAtStartCase(server: ServerUnderTest, by: number, steps: CaseSteps) {
  const step = (what: string) => steps.step('cut at start (dev)', what);
  return onLink(server, 'cut-at-start', 'before_current', step, async ({ link, stateDir, taskQueue, worker }) => {
    step('waiting for the worker to hold before its version is made current');
    await holding(worker, 'before_current');
    step('cut for 30 s');
    await link.cut();
    await sleep(30_000);
    step('the link healing');
    await link.heal();
    step('waiting for the run to end');
    const handle = await startCanonical(server, taskQueue);
    const end = await endOf(handle, stateDir, worker, by);
    return { end, worker: alive(worker), waited: worker.log().includes('is made current once it answers') };
  });
}

// The flapping link's case and the cut at a worker's start run meanwhile, each on its own link to the dev server: the suite waits the 2 minutes once for all.
it('with the worker cut off from the frontend for 2 minutes during a test run (the dev server and the cluster at once): each run completes once the link is back; and, meanwhile, with a flapping, slow link between another worker and the dev server, and with a third worker cut off for 30 s as it starts, before its version is made current: it waits for the server and then runs a run', async () => {
  const expected = { during: 'RUNNING', end: CLEAN_FINISH, worker: [null, null] };
  const by = Date.now() + 340_000;
  const steps = new CaseSteps();
  const [partitioned, flapping, cutAtStart] = await steps.within(
    Promise.all([
      Promise.all(KINDS.map((kind) => partitionCase(servers.get(kind)!, by, steps))),
      flappingCase(servers.get('dev')!, by, steps),
      cutAtStartCase(servers.get('dev')!, by, steps),
    ]),
    by + 5_000,
  );
  expect(partitioned).toEqual([expected, expected]);
  expect(flapping).toEqual({ end: CLEAN_FINISH, worker: [null, null] });
  expect(cutAtStart).toEqual({ end: CLEAN_FINISH, worker: [null, null], waited: true });
}, 360_000);

/** A run whose worker holds still at `point` while the server is SIGKILLed, left dead, and started again. */
async function killCase(server: ServerUnderTest, kind: ServerKind, point: FaultPoint, by: number) {
  const { stateDir, taskQueue, worker } = caseWorker(server, `server-kill-${kind}`, point);
  workers.push(worker);
  await worker.ready;
  const handle = await startCanonical(server, taskQueue);
  await holding(worker, point);
  await server.kill();
  await sleep(DOWN_MS);
  await server.start();
  return { end: await endOf(handle, stateDir, worker, by), worker: alive(worker) };
}

it.each<[string, FaultPoint]>([
  ['a write (the target holds the new content, its receipt not yet recorded)', 'after_rename'],
  ['a test run (the candidate tests just spawned)', 'during_tests'],
])(
  'with the Temporal server SIGKILLed during %s (the dev server and the cluster at once): each run completes with one write and one receipt per approved action',
  async (_what, point) => {
    const expected = { end: CLEAN_FINISH, worker: [null, null] };
    const by = Date.now() + 220_000;
    expect(await Promise.all(KINDS.map((kind) => killCase(servers.get(kind)!, kind, point, by)))).toEqual([expected, expected]);
  },
  240_000,
);

describe.each(KINDS)('the Temporal server (%s)', (kind) => {
  let server: ServerUnderTest;
  beforeAll(() => {
    server = servers.get(kind)!;
  });

  if (kind === 'cluster') {
    it('with PostgreSQL restarted during a test run: the run completes with one write and one receipt per approved action', async () => {
      const by = Date.now() + 220_000;
      const { stateDir, taskQueue, worker } = caseWorker(server, 'db-restart', 'during_tests');
      workers.push(worker);
      await worker.ready;
      const handle = await startCanonical(server, taskQueue);
      await holding(worker, 'during_tests');
      await server.restartDb();
      expect(await endOf(handle, stateDir, worker, by)).toEqual(CLEAN_FINISH);
      expect(alive(worker)).toEqual([null, null]);
    }, 240_000);
  }

  if (kind === 'dev') {
    it('a start asked while the server is dead is made once the server is back', async () => {
      await server.kill();
      const taskQueue = uniqueQueue('start-away');
      const starting = startRun(server.client, canonicalInput('canonical'), { taskQueue, workflowId: `${taskQueue}-run` });
      await sleep(3000);
      await server.start();
      const handle = await starting;
      const described = await handle.describe();
      expect([described.status.name, described.runId]).toEqual(['RUNNING', handle.firstExecutionRunId]);
      await handle.terminate('the test only started it');
    }, 120_000);

    it('a start asked while the namespace is not yet known (as a cluster answers while it starts) is made once it is known', async () => {
      const namespace = `arriving-${process.pid}`;
      const client = new Client({ connection: server.client.connection, namespace });
      const taskQueue = uniqueQueue('start-namespace');
      const starting = startRun(client, canonicalInput('canonical'), { taskQueue, workflowId: `${taskQueue}-run` });
      await sleep(2000);
      execFileSync(temporalBinary(SETTINGS), ['operator', 'namespace', 'create', '--namespace', namespace, '--address', server.address]);
      const handle = await starting;
      expect((await handle.describe()).status.name).toBe('RUNNING');
      await handle.terminate('the test only started it');
    }, 120_000);

    it('tells a server away (not answering, namespace not yet known) from other errors', () => {
      expect([serverAway(new NamespaceNotFoundError('default')), serverAway(new Error('UNAVAILABLE')), serverAway(null)]).toEqual([
        true,
        false,
        false,
      ]);
    });
  }
});
