/**
 * Server soak, outside CI (`npm run test:server-soak`; jest.config.js leaves it out of `npm test`):
 * canonical runs, a few at a time on one real worker process, while the Temporal server is
 * SIGKILLed and started again at seeded random moments, or while the link between the worker and
 * the server is cut for seeded random spans (Toxiproxy). It prints runs, faults, completed runs,
 * duplicate writes, lost runs and the time to recover (from the last fault a run saw to its end:
 * the longest and the median), and fails unless every run completed with one write and one
 * receipt per approved action.
 *
 *   SERVER_SOAK_BACKENDS  dev,cluster,partition (default all three): the dev server killed, the
 *                         cluster's server killed, the dev server's link cut
 *   SERVER_SOAK_SEED      the seed of every delay (printed; the same seed gives the same delays)
 *   SERVER_SOAK_KILLS     server SIGKILLs per server backend (default 100)
 *   SERVER_SOAK_CUTS      link cuts of the partition soak (default 20)
 *   SERVER_SOAK_CONCURRENCY  runs at a time (default 3)
 */
import type { WorkflowHandleWithFirstExecutionRunId } from '@temporalio/client';
import { CLEAN_FINISH, finishedState, seededRandom, startWorker, type WorkerProcess } from './helpers/faults';
import { tempDir } from './helpers/run-dir';
import { outcomeThroughOutages, startCanonical } from './helpers/server-faults';
import { networkLink, startBackend, type NetworkLink, type ServerUnderTest } from '../scripts/support/servers';
import { uniqueQueue } from './helpers/temporal';

type SoakKind = 'dev' | 'cluster' | 'partition';

const BACKENDS = (process.env.SERVER_SOAK_BACKENDS ?? 'dev,cluster,partition').split(',').map((b) => b.trim()) as SoakKind[];
const SEED = Number(process.env.SERVER_SOAK_SEED ?? 20261205);
const KILLS = Number(process.env.SERVER_SOAK_KILLS ?? 100);
const CUTS = Number(process.env.SERVER_SOAK_CUTS ?? 20);
const CONCURRENCY = Number(process.env.SERVER_SOAK_CONCURRENCY ?? 3);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface RunResult {
  started: number;
  ended: number;
  state: ReturnType<typeof finishedState> | null;
  error: string | null;
}

interface Summary {
  backend: SoakKind;
  seed: number;
  runs: number;
  faults: number;
  completed: number;
  duplicate_writes: number;
  lost_runs: number;
  worker_restarts: number;
  recover_longest_s: number;
  recover_median_s: number;
  seconds: number;
  failures: string[];
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? 0 : s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

/**
 * One soak: runs go on `CONCURRENCY` at a time while `fault` is applied `count` times, each after
 * a seeded random pause; then the runs in flight are waited for.
 */
async function soak(backend: SoakKind, server: ServerUnderTest, link: NetworkLink | null, count: number): Promise<Summary> {
  const began = Date.now();
  const random = seededRandom(SEED + ['dev', 'cluster', 'partition'].indexOf(backend));
  const stateDir = tempDir(`agent-server-soak-${backend}`);
  const taskQueue = uniqueQueue(`server-soak-${backend}`);
  const extraEnv: Record<string, string> = link ? { TEMPORAL_ADDRESS: link.address } : {};
  let workerRestarts = 0;
  let worker: WorkerProcess = startWorker(server, taskQueue, stateDir, undefined, extraEnv);
  await worker.ready;
  let stopping = false;
  // A worker that died is replaced (and counted): the harness's promise is about runs, and a
  // worker a supervisor restarts is part of it.
  const watch = async (): Promise<void> => {
    const w = worker;
    const end = await w.exit;
    if (stopping) return;
    process.stderr.write(
      `server soak ${backend}: the worker ended (${end.signal ?? end.code}); starting another\n${w.log().slice(-2000)}\n`,
    );
    workerRestarts++;
    worker = startWorker(server, taskQueue, stateDir, undefined, extraEnv);
    void watch();
  };
  void watch();

  const faults: number[] = [];
  let faulting = true;
  // A run still going 10 minutes after the last fault is lost: said so, not waited for forever.
  let faultsOver: () => void = () => undefined;
  const lost = new Promise<never>((_, reject) => {
    faultsOver = () => setTimeout(() => reject(new Error('still not ended 10 minutes after the last fault')), 600_000).unref();
  });
  lost.catch(() => undefined);
  const results: Promise<RunResult>[] = [];
  let index = 0;
  const runOne = async (): Promise<RunResult> => {
    const started = Date.now();
    let handle: WorkflowHandleWithFirstExecutionRunId | null = null;
    try {
      handle = await startCanonical(server, taskQueue, `${taskQueue}-run-${++index}`);
      const outcome = await Promise.race([outcomeThroughOutages(handle, 900_000), lost]);
      return { started, ended: Date.now(), state: finishedState(outcome, stateDir, handle.firstExecutionRunId), error: null };
    } catch (err) {
      return { started, ended: Date.now(), state: null, error: `${handle?.workflowId ?? 'a start'}: ${(err as Error).message}` };
    }
  };
  const lane = async () => {
    while (faulting) {
      const p = runOne();
      results.push(p);
      await p;
    }
  };
  const lanes = Array.from({ length: CONCURRENCY }, () => lane());

  for (let i = 0; i < count; i++) {
    await sleep(500 + Math.floor(random() * 6000));
    faults.push(Date.now());
    if (link) {
      await link.cut();
      await sleep(2000 + Math.floor(random() * 38_000));
      await link.heal();
    } else {
      await server.kill();
      await sleep(200 + Math.floor(random() * 2800));
      await server.start();
    }
  }
  faulting = false;
  faultsOver();
  await Promise.all(lanes);
  const settled = await Promise.all(results);
  stopping = true;
  await worker.stop();

  const failures: string[] = [];
  let completed = 0;
  let duplicates = 0;
  const recover: number[] = [];
  settled.forEach((r, i) => {
    if (r.state === null) return failures.push(`run ${i + 1}: ${r.error}`);
    if (r.state.status === 'completed') completed++;
    duplicates += Math.max(0, r.state.ledger_receipts - CLEAN_FINISH.ledger_receipts) + Math.max(0, r.state.writes - CLEAN_FINISH.writes);
    if (JSON.stringify(r.state) !== JSON.stringify(CLEAN_FINISH)) failures.push(`run ${i + 1}: ${JSON.stringify(r.state)}`);
    const last = faults.filter((t) => t >= r.started && t <= r.ended).pop();
    if (last !== undefined) recover.push((r.ended - last) / 1000);
  });
  return {
    backend,
    seed: SEED,
    runs: settled.length,
    faults: faults.length,
    completed,
    duplicate_writes: duplicates,
    lost_runs: settled.length - completed,
    worker_restarts: workerRestarts,
    recover_longest_s: Math.max(0, ...recover),
    recover_median_s: median(recover),
    seconds: Math.round((Date.now() - began) / 1000),
    failures,
  };
}

describe(`the Temporal server killed and cut off at seeded random moments (seed ${SEED}; ${BACKENDS.join(', ')})`, () => {
  it.each(BACKENDS)(
    '%s: every run completes with one write and one receipt per approved action',
    async (backend) => {
      const server = await startBackend(backend === 'cluster' ? 'cluster' : 'dev');
      const link = backend === 'partition' ? await networkLink(server.address) : null;
      try {
        const s = await soak(backend, server, link, backend === 'partition' ? CUTS : KILLS);
        const fault = backend === 'partition' ? 'cuts' : 'kills';
        console.log(
          [
            `server soak ${backend} (seed ${s.seed}, ${s.seconds} s):`,
            `  runs ${s.runs}, ${fault} ${s.faults}, completed ${s.completed}, duplicate writes ${s.duplicate_writes}, lost runs ${s.lost_runs}, worker restarts ${s.worker_restarts}`,
            `  time to recover (last fault a run saw to its end): longest ${s.recover_longest_s.toFixed(1)} s, median ${s.recover_median_s.toFixed(1)} s`,
            ...s.failures.map((f) => `  ${f}`),
          ].join('\n'),
        );
        expect({ completed: s.completed, duplicate_writes: s.duplicate_writes, lost_runs: s.lost_runs, failures: s.failures }).toEqual({
          completed: s.runs,
          duplicate_writes: 0,
          lost_runs: 0,
          failures: [],
        });
      } finally {
        await link?.close();
        await server.close();
      }
    },
    4 * 3600_000,
  );
});
