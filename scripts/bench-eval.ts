/**
 * `npm run bench:eval`: batch throughput with one worker process and with two. A 24-run batch
 * (12 replays of 5 fixtures, 2 epochs) runs as one agentEval on a real Temporal dev server,
 * first with one `node dist/worker/main.js`, then with two (separate state folders, as two
 * hosts would have). Prints runs per minute for each and the ratio, beside the machine's core
 * count, and writes bench/eval-results.json. Nothing here asserts.
 *
 *   BENCH_REPEATS (2)        batches per worker count (the median is reported)
 *   BENCH_CONCURRENCY (8)    the batch's --concurrency
 */
import { type ChildProcess, execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { buildPlan } from '../client/eval';
import { temporalBinary } from '../host/temporal-bin';
import type { EvalPlan } from '../core/batch-plan';
import { PROJECT_ROOT, tempDir, SETTINGS } from './support/run-dir';
import { killed, spawnWorker, startServer, uniqueQueue } from './support/temporal';
import { evalResult, startEval } from '../client/run-access';

const REPEATS = Number(process.env.BENCH_REPEATS ?? 2);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 8);
const FIXTURES = ['linkcheck-nested', 'wordcount-node', 'py-duration-junit', 'py-booking-overlap', 'node-money-split'];
const EPOCHS = 2;

const plan = async (): Promise<EvalPlan> =>
  await buildPlan(
    SETTINGS,
    FIXTURES.map((id) => join(PROJECT_ROOT, 'fixtures', id)),
    { epochs: EPOCHS, backend: 'local', approver: 'policy:approve-writable', trustReplay: true },
  );

/** A worker process with its own state folder (a host of its own); resolves once it polls. */
function startWorker(env: TestWorkflowEnvironment, taskQueue: string): Promise<ChildProcess> {
  // The batch runs on the local backend: each host's operator allows it.
  const child = spawnWorker(env, taskQueue, tempDir('bench-eval-host'), { AGENT_ALLOW_LOCAL: '1' });
  return new Promise((resolve, reject) => {
    let err = '';
    child.stderr!.on('data', (chunk: Buffer) => {
      err += chunk.toString();
      if (err.includes('worker polling task queue')) resolve(child);
    });
    child.once('exit', (code) => reject(new Error(`worker exited ${code} before polling: ${err.slice(-500)}`)));
  });
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

async function main(): Promise<void> {
  const env = await startServer();
  const p = await plan();
  const runs = p.fixtures.reduce((n, f) => n + f.replays.length, 0) * EPOCHS;
  const rows: { workers: number; seconds: number[]; runs_per_min: number; completed: number }[] = [];
  try {
    for (const workers of [1, 2]) {
      const seconds: number[] = [];
      let completed = 0;
      for (let r = 0; r < REPEATS; r++) {
        const taskQueue = uniqueQueue(`bench-eval-${workers}`);
        const procs = await Promise.all(Array.from({ length: workers }, () => startWorker(env, taskQueue)));
        try {
          const t = performance.now();
          const handle = await startEval(
            env.client,
            { plan: p, concurrency: CONCURRENCY },
            { taskQueue, workflowId: `${taskQueue}-batch` },
          );
          const result = await evalResult(handle);
          seconds.push((performance.now() - t) / 1000);
          completed = result.progress.completed;
          if (result.progress.done !== runs) throw new Error(`batch ended with ${result.progress.done} of ${runs} runs done`);
        } finally {
          for (const w of procs) w.kill('SIGTERM');
          await Promise.all(procs.map(killed));
        }
        process.stderr.write(`  ${workers} worker(s), batch ${r + 1}: ${seconds.at(-1)!.toFixed(1)} s\n`);
      }
      rows.push({ workers, seconds, runs_per_min: +((runs / median(seconds)) * 60).toFixed(1), completed });
    }
  } finally {
    await env.teardown();
  }
  const ratio = +(rows[1].runs_per_min / rows[0].runs_per_min).toFixed(2);
  const machine = {
    cores: cpus().length,
    cpu: cpus()[0]?.model ?? 'unknown',
    memory_gib: +(totalmem() / 2 ** 30).toFixed(1),
    node: process.version,
    temporal: execFileSync(temporalBinary(SETTINGS), ['--version'], { encoding: 'utf8' }).trim(),
  };
  console.log(`| worker processes | runs | batch seconds (median of ${REPEATS}) | runs/min | completed |`);
  console.log('|---|---|---|---|---|');
  for (const r of rows) console.log(`| ${r.workers} | ${runs} | ${median(r.seconds).toFixed(1)} | ${r.runs_per_min} | ${r.completed} |`);
  console.log(`\nratio (2 workers / 1 worker): ${ratio} on ${machine.cores} cores (${machine.cpu}); batch concurrency ${CONCURRENCY}`);
  mkdirSync(join(PROJECT_ROOT, 'bench'), { recursive: true });
  writeFileSync(
    join(PROJECT_ROOT, 'bench', 'eval-results.json'),
    `${JSON.stringify({ machine, runs, concurrency: CONCURRENCY, repeats: REPEATS, rows, ratio }, null, 2)}\n`,
  );
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
