/**
 * Batch evaluation at scale, against a real Temporal dev server: a 1,000-run parent under the
 * suggested history limits, a resume after the only worker was killed, and two worker processes
 * (two hosts: separate state folders) of which one is killed mid-batch.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { cpSync, existsSync, readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import Database = require('better-sqlite3');
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { collectReport } from '../client/eval';
import { readSettings } from '../host/settings';
import { createWorker } from '../worker';
import type { EvalPlan } from '../core/batch-plan';
import type { EvalReport } from '../client/report/report';
import { LINKCHECK, PROJECT_ROOT, tempDir } from './helpers/run-dir';
import { killed, spawnWorker, startServer, uniqueQueue, waitFor } from './helpers/temporal';
import { evalProgress, evalResult, startEval } from '../client/run-access';

const exec = promisify(execFile);
const CLI = join(PROJECT_ROOT, 'dist', 'client', 'cli.js');

/** A copy of the link-check fixture whose only replay is `replays/<name>.json`. */
function fixtureWith(name: string, decisions: unknown[]): string {
  const dir = join(tempDir('eval-fixture'), 'linkcheck-nested');
  cpSync(LINKCHECK, dir, { recursive: true, filter: (src) => !src.includes(`${join(LINKCHECK, 'replays')}/`) });
  mkdirSync(join(dir, 'replays'), { recursive: true });
  writeFileSync(join(dir, 'replays', `${name}.json`), JSON.stringify({ schema_version: 1, decisions }));
  return dir;
}

const canonicalDecisions = () => JSON.parse(readFileSync(join(LINKCHECK, 'replays', 'canonical.json'), 'utf8')).decisions as unknown[];

/** Every run (segment) of a workflow id, with its history's event count and size in bytes. */
async function segments(env: TestWorkflowEnvironment, workflowId: string): Promise<{ events: number; bytes: number }[]> {
  const all: { events: number; bytes: number }[] = [];
  for await (const run of env.client.workflow.list({ query: `WorkflowId = '${workflowId}'` })) {
    const info = (await env.client.workflow.getHandle(workflowId, run.runId).describe()).raw.workflowExecutionInfo!;
    all.push({ events: Number(info.historyLength), bytes: Number(info.historySizeBytes) });
  }
  return all;
}

describe('batch evaluation at scale', () => {
  let env: TestWorkflowEnvironment;
  beforeAll(async () => {
    env = await startServer();
  });
  afterAll(async () => {
    await env?.teardown();
  });

  it('runs 1,000 short runs with a parent whose every history segment stays under the suggested limits', async () => {
    const fixture = fixtureWith('quick', []);
    const plan: EvalPlan = {
      fixtures: [{ dir: fixture, replays: [{ path: join(fixture, 'replays', 'quick.json'), name: 'quick', trusted: true }] }],
      epochs: 1000,
      backend: 'local',
      approver: 'policy:approve-writable',
    };
    const taskQueue = uniqueQueue('eval-1000');
    const stateDir = tempDir('eval-1000-state');
    const { worker, close } = await createWorker({ connection: env.nativeConnection, taskQueue, stateDir, docker: false });
    const batch = `batch-1000-${process.pid}`;
    try {
      const result = await worker.runUntil(async () => {
        const handle = await startEval(env.client, { plan, concurrency: 25 }, { taskQueue, workflowId: batch });
        return evalResult(handle);
      });
      expect(result.progress).toMatchObject({ total: 1000, done: 1000, completed: 0, running: 0, by_status: { failed: 1000 } });
      const parts = await segments(env, batch);
      const largest = parts.reduce((m, p) => (p.bytes > m.bytes ? p : m));
      process.stdout.write(
        `1,000-run parent: ${parts.length} segments; largest history ${largest.events} events, ${largest.bytes} bytes\n`,
      );
      expect(parts.length).toBeGreaterThanOrEqual(5);
      for (const p of parts) {
        expect(p.events).toBeLessThan(4096);
        expect(p.bytes).toBeLessThan(4 * 1024 * 1024);
      }
      // The report is assembled from the runs' own results, found by their keys: 1,000 rows.
      const collected = await collectReport(env.client, { ...readSettings(), stateDir }, batch, plan, null);
      expect(collected.report.runs).toHaveLength(1000);
      expect(new Set(collected.report.runs.map((r) => r.epoch)).size).toBe(1000);
      expect(collected.report.runs.every((r) => r.status === 'failed' && r.reason === 'replay_exhausted')).toBe(true);
      expect(collected.report.summary).toMatchObject({ runs: 1000, completed: 0, epochs: 1000, flaky: [] });
    } finally {
      close();
    }
  }, 900_000);

  /** `npm run agent -- eval` against this cluster (no worker in the command's own process). */
  const evalCli = (args: string[], taskQueue: string) =>
    spawn(process.execPath, [CLI, 'eval', ...args, ...(args[0] === '--resume' ? [] : ['--trust-replay'])], {
      env: { ...process.env, TEMPORAL_ADDRESS: env.address, AGENT_TASK_QUEUE: taskQueue },
      cwd: PROJECT_ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
  const finished = (child: ChildProcess): Promise<{ code: number | null; stdout: string; stderr: string }> =>
    new Promise((resolve) => {
      let stdout = '';
      let stderr = '';
      child.stdout!.on('data', (d) => (stdout += d));
      child.stderr!.on('data', (d) => (stderr += d));
      child.on('exit', (code) => resolve({ code, stdout, stderr }));
    });
  const doneRuns = async (batch: string): Promise<number> => {
    try {
      return (await evalProgress(env.client.workflow.getHandle(batch))).done;
    } catch {
      return 0;
    }
  };
  /** Writes per run id in one host's ledger, and every action id it wrote. */
  const ledgerOf = (stateDir: string) => {
    const db = new Database(join(stateDir, 'ledger.sqlite'), { readonly: true });
    try {
      return db.prepare('SELECT action_id, run_id FROM receipts').all() as { action_id: string; run_id: string }[];
    } finally {
      db.close();
    }
  };

  it('resumes a batch whose only worker and command were killed: every run present exactly once, first outcomes of retried runs kept', async () => {
    const fixture = fixtureWith('canonical', canonicalDecisions());
    // A decision in flight on the dead worker is noticed at its call timeout: keep that short.
    const spec = JSON.parse(readFileSync(join(fixture, 'fixture.json'), 'utf8'));
    writeFileSync(join(fixture, 'fixture.json'), JSON.stringify({ ...spec, budgets: { ...spec.budgets, call_timeout_s: 10 } }));
    // Each test run takes 2 s more, so a run spends seconds between its two writes (the red test
    // run lies between them) and the kill below finds one there however fast the steps are.
    writeFileSync(join(fixture, 'repo', 'tests', 'conftest.py'), 'import time\n\n\ndef pytest_sessionstart(session):\n    time.sleep(2)\n');
    const taskQueue = uniqueQueue('eval-resume');
    const stateDir = tempDir('eval-resume-state');
    const out = tempDir('eval-resume-out');
    const batch = `batch-resume-${process.pid}`;
    let worker = spawnWorker(env, taskQueue, stateDir);
    const first = evalCli(
      [fixture, '--epochs', '6', '--concurrency', '3', '--batch', batch, '--host-lost-s', '3', '--out', out],
      taskQueue,
    );
    const firstDone = finished(first);
    // Killed once a run is done and another is midway on this host (its first write made, its
    // second not yet), so that one is sure to be lost with the host.
    const midway = () => {
      const perRun = new Map<string, number>();
      for (const r of existsSync(join(stateDir, 'ledger.sqlite')) ? ledgerOf(stateDir) : [])
        perRun.set(r.run_id, (perRun.get(r.run_id) ?? 0) + 1);
      return [...perRun.values()].includes(1);
    };
    await waitFor('a first run done and another midway', async () => (await doneRuns(batch)) >= 1 && midway(), 120_000);
    // The worker and the command that follows the batch die at once.
    worker.kill('SIGKILL');
    first.kill('SIGKILL');
    await Promise.all([killed(worker), firstDone]);
    // The machine does not come back: a new host (its own state folder) takes over. Runs held
    // by the dead host end host_lost; the rest run on the new one.
    const stateDir2 = tempDir('eval-resume-state2');
    worker = spawnWorker(env, taskQueue, stateDir2);
    try {
      const resumed = await finished(evalCli(['--resume', batch, '--out', out], taskQueue));
      expect(resumed.code).toBe(0);
      const report = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as EvalReport;
      expect(report.runs.map((r) => r.epoch)).toEqual([1, 2, 3, 4, 5, 6]);
      expect(report.runs.every((r) => r.status === 'completed')).toBe(true);
      const retried = report.runs.filter((r) => r.retried);
      process.stdout.write(
        `resume: ${retried.length} of 6 runs retried, first outcomes ${JSON.stringify(retried.map((r) => r.retried!.first))}\n`,
      );
      expect(retried.length).toBeGreaterThan(0);
      for (const r of retried) expect(r.retried!.first).toEqual({ status: 'failed', reason: 'host_lost' });
      expect(resumed.stderr).toMatch(/resuming; [1-9]\d* runs retried/);
      // No action was written twice: one receipt per action id across both hosts.
      const receipts = [...ledgerOf(stateDir), ...ledgerOf(stateDir2)];
      expect(new Set(receipts.map((r) => r.action_id)).size).toBe(receipts.length);
      for (const r of report.runs) expect(r.receipts).toBe(r.writes);
    } finally {
      worker.kill('SIGKILL');
      await killed(worker);
    }
  }, 600_000);

  it("shares a batch between two hosts; the killed host's runs end host_lost and --resume completes them on the survivor", async () => {
    const fixture = fixtureWith('canonical', canonicalDecisions());
    const taskQueue = uniqueQueue('eval-hosts');
    const stateA = tempDir('eval-host-a');
    const stateB = tempDir('eval-host-b');
    const out = tempDir('eval-hosts-out');
    const batch = `batch-hosts-${process.pid}`;
    const a = spawnWorker(env, taskQueue, stateA);
    const b = spawnWorker(env, taskQueue, stateB);
    try {
      const run = finished(
        evalCli([fixture, '--epochs', '8', '--concurrency', '4', '--batch', batch, '--host-lost-s', '4', '--out', out], taskQueue),
      );
      // Host B is killed once it holds runs of its own.
      await waitFor('a write on host B', async () => ledgerOf(stateB).length > 0, 120_000);
      b.kill('SIGKILL');
      await killed(b);
      const first = await run;
      expect(first.code).toBe(0);
      const before = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as EvalReport;
      expect(before.runs).toHaveLength(8);
      const lost = before.runs.filter((r) => r.reason === 'host_lost');
      process.stdout.write(
        `two hosts: ${lost.length} of 8 runs host_lost after host B was killed; outcomes ${JSON.stringify(before.runs.map((r) => r.reason ?? r.status))}\n`,
      );
      expect(lost.length).toBeGreaterThan(0);
      expect(before.runs.every((r) => r.status === 'completed' || r.reason === 'host_lost')).toBe(true);

      const resumed = await finished(evalCli(['--resume', batch, '--out', out], taskQueue));
      expect(resumed.code).toBe(0);
      const after = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as EvalReport;
      expect(after.runs.map((r) => r.status)).toEqual(Array(8).fill('completed'));
      expect(after.runs.filter((r) => r.retried).map((r) => r.epoch)).toEqual(lost.map((r) => r.epoch));
      // None wrote twice: every action id is in one ledger once, and no run has writes on both hosts.
      const ra = ledgerOf(stateA);
      const rb = ledgerOf(stateB);
      const ids = [...ra, ...rb].map((r) => r.action_id);
      expect(new Set(ids).size).toBe(ids.length);
      const runsA = new Set(ra.map((r) => r.run_id));
      expect(rb.filter((r) => runsA.has(r.run_id))).toEqual([]);
      for (const r of after.runs) expect(r.receipts).toBe(r.writes);
    } finally {
      for (const w of [a, b]) w.kill('SIGKILL');
      await Promise.all([killed(a), killed(b)]);
    }
  }, 900_000);
});

describe('eval compare', () => {
  it('prints exactly the run that flipped between two reports, with the exact McNemar p-value', async () => {
    const dir = tempDir('eval-compare');
    const run = (fixture: string, epoch: number, status: string, reason: string | null) => ({
      fixture,
      replay: 'canonical',
      epoch,
      status,
      reason,
      writes: 2,
      receipts: 2,
      red_observed: true,
      diff_paths: [],
      candidate_tests: null,
      acceptance: null,
      tool_errors: {},
    });
    const runs = ['alpha', 'beta', 'gamma'].flatMap((f) => [1, 2].map((e) => run(f, e, 'completed', null)));
    const a = { schema_version: 1, runs, summary: { runs: 6, completed: 6, failed: 0, epochs: 2 } };
    const b = {
      ...a,
      runs: runs.map((r) => (r.fixture === 'beta' && r.epoch === 2 ? { ...r, status: 'failed', reason: 'verification_failed' } : r)),
      summary: { runs: 6, completed: 5, failed: 1, epochs: 2 },
    };
    writeFileSync(join(dir, 'a.json'), JSON.stringify(a));
    writeFileSync(join(dir, 'b.json'), JSON.stringify(b));
    const { stdout } = await exec(process.execPath, [CLI, 'eval', 'compare', join(dir, 'a.json'), join(dir, 'b.json')]);
    const flipped = stdout.split('\n').filter((l) => /^[+-] /.test(l));
    expect(flipped).toEqual(['- beta canonical epoch 2: completed -> failed/verification_failed']);
    expect(stdout).toContain('6 paired runs, 1 flipped');
    expect(stdout).toContain('McNemar exact p = 1 (completed only in A: 1, only in B: 0)');
    // Reports of different run sets are refused.
    writeFileSync(join(dir, 'c.json'), JSON.stringify({ ...a, runs: runs.slice(1) }));
    const refused = await exec(process.execPath, [CLI, 'eval', 'compare', join(dir, 'a.json'), join(dir, 'c.json')]).catch((e) => e);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('denominators differ');
  });
});
