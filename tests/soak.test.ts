/**
 * Soak: canonical runs whose worker process is SIGKILLed at a random moment, each finished by a
 * fresh worker; and the Temporal dev server itself restarted on the same database while a run
 * waits for approval. Runs with `npm run test:faults`.
 *
 * The kill delays come from a seeded generator; the seed and each delay are in the test names,
 * so a failing delay can be replayed (SOAK_SEED, SOAK_RUNS, SOAK_CONCURRENCY, SOAK_MAX_DELAY_MS).
 * A killed activity is retried only after its timeout (10 s start-to-close for quick activities,
 * 10 s heartbeat for tests and verify), so runs go several at a time on one server.
 */
import { readdirSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { ensureDevServer } from '../host/temporal-server';
import {
  CLEAN_FINISH,
  deathOf,
  finishedState,
  killPoint,
  processEnded,
  seededRandom,
  startWorker,
  type ExitStatus,
} from './helpers/faults';
import { tempDir, freePort, SETTINGS } from './helpers/run-dir';
import { approveAll, canonicalInput, pendingApproval, startServer, testEnvironment, uniqueQueue } from './helpers/temporal';
import { startRun } from '../client/run-access';
import type { RunOutcome } from '../core/run-view';
import { temporalBinary } from '../host/temporal-bin';
import { collectHistories } from '../scripts/support/histories';

const SEED = Number(process.env.SOAK_SEED ?? 20251202);
const RUNS = Number(process.env.SOAK_RUNS ?? 12);
const CONCURRENCY = Number(process.env.SOAK_CONCURRENCY ?? 4);
/**
 * A canonical run takes about 2 s alone and 5 to 8 s with four at a time on two cores: kills up
 * to 5 s after the start land in every phase, a few after the end (the summary says where).
 */
const MAX_DELAY_MS = Number(process.env.SOAK_MAX_DELAY_MS ?? 5000);

const random = seededRandom(SEED);
const DELAYS = Array.from({ length: RUNS }, () => Math.floor(random() * MAX_DELAY_MS));

interface SoakResult {
  delay: number;
  death: ExitStatus;
  /** Where the run stood when its worker died (activities in flight, the workflow task, or the end). */
  killedIn: string;
  state: ReturnType<typeof finishedState>;
  seconds: number;
}

/** Runs `tasks` with at most `limit` at a time; each promise settles with its own task. */
function limited<T>(tasks: (() => Promise<T>)[], limit: number): Promise<T>[] {
  let running = 0;
  const waiting: (() => void)[] = [];
  const acquire = () => (running < limit ? (running++, Promise.resolve()) : new Promise<void>((resolve) => waiting.push(resolve)));
  const release = () => {
    const next = waiting.shift();
    if (next) next();
    else running--;
  };
  return tasks.map(async (task) => {
    await acquire();
    try {
      return await task();
    } finally {
      release();
    }
  });
}

/** Live processes whose working directory lies under `dir`: a leftover test tree would be one. */
function processesWorkingIn(dir: string): string[] {
  const found: string[] = [];
  for (const pid of readdirSync('/proc').filter((n) => /^\d+$/.test(n))) {
    try {
      if (`${readlinkSync(`/proc/${pid}/cwd`)}/`.startsWith(`${dir}/`)) found.push(pid);
    } catch {
      // gone meanwhile, or not ours
    }
  }
  return found;
}

describe(`canonical runs with the worker killed at a random moment (seed ${SEED}, ${RUNS} runs, ${CONCURRENCY} at a time)`, () => {
  let env: TestWorkflowEnvironment;
  let results: Promise<SoakResult | Error>[] = [];
  const soakRoot = tempDir('agent-soak');

  async function soakRun(index: number, delay: number): Promise<SoakResult> {
    const started = Date.now();
    const stateDir = join(soakRoot, `run-${index + 1}`);
    const taskQueue = uniqueQueue(`soak-${index + 1}`);
    const doomed = startWorker(env, taskQueue, stateDir);
    await doomed.ready; // the delay counts from the run's start on a polling worker
    const handle = await startRun(env.client, canonicalInput('canonical'), { taskQueue, workflowId: `${taskQueue}-run` });
    await new Promise((resolve) => setTimeout(resolve, delay));
    doomed.child.kill('SIGKILL');
    const death = await deathOf(doomed);
    const killedIn = await killPoint(handle);
    const fresh = startWorker(env, taskQueue, stateDir);
    try {
      const outcome = (await handle.result()) as RunOutcome;
      return {
        delay,
        death,
        killedIn,
        state: finishedState(outcome, stateDir, handle.firstExecutionRunId),
        seconds: Math.round((Date.now() - started) / 1000),
      };
    } finally {
      await fresh.stop();
    }
  }

  beforeAll(async () => {
    env = await startServer();
    // All runs start now; each test below waits for its own. A failure is kept as a value so no
    // promise is left rejected before its test looks at it.
    results = limited(
      DELAYS.map((delay, i) => () => soakRun(i, delay)),
      CONCURRENCY,
    ).map((p) => p.catch((err: unknown) => (err instanceof Error ? err : new Error(String(err)))));
  });

  afterAll(async () => {
    const settled = await Promise.all(results);
    const lines = settled.map((r, i) =>
      r instanceof Error
        ? `run ${i + 1}: ${r.message}`
        : `run ${i + 1}: ${r.delay} ms -> killed ${r.killedIn}, ${r.state.status} in ${r.seconds} s`,
    );
    console.log(`soak seed ${SEED}:\n${lines.join('\n')}`);
    await env?.teardown();
  });

  DELAYS.forEach((delay, i) => {
    it(`run ${i + 1}/${RUNS}: worker killed ${delay} ms after the start completes with two writes and two receipts`, async () => {
      const result = await results[i];
      if (result instanceof Error) throw result;
      expect({ death: result.death, ...result.state }).toEqual({ death: { code: null, signal: 'SIGKILL' }, ...CLEAN_FINISH });
    }, 300_000);
  });

  it('leaves no process running in any run folder', async () => {
    await Promise.all(results);
    expect(processesWorkingIn(soakRoot)).toEqual([]);
  });
});

describe('the Temporal dev server restarted on the same database', () => {
  it('accepts the approvals of a run that was waiting when the server went down, and the run completes', async () => {
    const stateDir = tempDir('agent-restart');
    const port = await freePort();
    const uiPort = await freePort();
    const options = { temporal: temporalBinary(SETTINGS), stateDir, port, uiPort, attached: true };
    let server = await ensureDevServer(options);
    expect(server.started).toBe(true);
    const env = await testEnvironment(server.address);
    const taskQueue = uniqueQueue('restart');
    const worker = startWorker(env, taskQueue, stateDir);
    try {
      const handle = await startRun(env.client, canonicalInput('canonical', { approver: 'interactive' }), {
        taskQueue,
        workflowId: `${taskQueue}-run`,
      });
      const before = await pendingApproval(handle);

      server.stop(); // SIGTERM
      await processEnded(server.pid!);
      server = await ensureDevServer(options); // same port, same temporal.db
      expect(server.started).toBe(true);

      // The run is still waiting for the same action, and the same worker process carries on.
      expect((await pendingApproval(handle)).action_id).toBe(before.action_id);
      expect(await approveAll(handle)).toBe(2);
      const outcome = (await handle.result()) as RunOutcome;
      expect(finishedState(outcome, stateDir, handle.firstExecutionRunId)).toEqual(CLEAN_FINISH);
      expect([worker.child.exitCode, worker.child.signalCode]).toEqual([null, null]);
    } finally {
      await worker.stop();
      await collectHistories(server.address);
      await env.teardown();
      server.stop();
      if (server.pid !== null) await processEnded(server.pid);
    }
  });
});
