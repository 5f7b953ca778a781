/**
 * Crash windows with real processes: a worker started with AGENT_FAULT=<point> kills itself with
 * SIGKILL at that point of the canonical run, a fresh worker finishes the run, and the writes,
 * receipts and workspace digests are exactly what the ledger predicts. Each killed activity is
 * retried once its timeout passes (10 s start-to-close, or 10 s heartbeat for tests and verify).
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { defaultProcessDir, ProcessGroups } from '../sandbox/backends/local';
import type { FaultPoint } from '../host/faults';
import { runPaths } from '../workspace/workspace';
import type { RunInput } from '../core/contracts';
import {
  activityAttempts,
  CLEAN_FINISH,
  deathOf,
  fileDigest,
  finishedState,
  fixtureWithSleepingChild,
  ledgerReceipts,
  processesRunning,
  startWorker,
  withLedger,
  workspaceOf,
} from './helpers/faults';
import { LINKCHECK, tempDir, SETTINGS } from './helpers/run-dir';
import { canonicalInput, pendingApproval, startServer, traceIn, uniqueQueue, waitFor } from './helpers/temporal';
import { sendApproval, startRun } from '../client/run-access';
import type { RunOutcome } from '../core/run-view';
import { hostPath } from '../host/tools-env';

const ADDED_TEST = 'tests/test_agent_nested.py'; // the canonical run's first write (a new file)
const SOURCE = 'src/linkcheck.py'; // its second write
const CANONICAL_DECISIONS = (JSON.parse(readFileSync(join(LINKCHECK, 'replays', 'canonical.json'), 'utf8')) as { decisions: unknown[] })
  .decisions.length;

let env: TestWorkflowEnvironment;
beforeAll(async () => {
  env = await startServer();
});
afterAll(async () => {
  await env?.teardown();
});

/**
 * Starts a run on a worker with AGENT_FAULT=point and waits for that worker to die. `workerEnv`
 * is given to it and to the fresh worker that finishes the run.
 */
async function runUntilFault(point: FaultPoint, input: RunInput = canonicalInput('canonical'), workerEnv: Record<string, string> = {}) {
  const stateDir = tempDir('agent-state');
  const taskQueue = uniqueQueue(`fault-${point}`);
  const doomed = startWorker(env, taskQueue, stateDir, point, workerEnv);
  const handle = await startRun(env.client, input, { taskQueue, workflowId: `${taskQueue}-run` });
  const death = await deathOf(doomed).catch((err: unknown) => {
    doomed.child.kill('SIGKILL'); // it never reached the point: do not leave it polling
    throw err;
  });
  const runId = handle.firstExecutionRunId;
  const workspace = workspaceOf(stateDir, runId);
  return {
    stateDir,
    taskQueue,
    workerEnv,
    handle,
    runId,
    death,
    doomedPid: doomed.child.pid,
    workspace,
    digestOf: (path: string) => fileDigest(join(workspace, path)),
  };
}

type Crash = Awaited<ReturnType<typeof runUntilFault>>;

/** A fresh worker without a fault finishes the run. */
async function finishOnFreshWorker(crash: Crash): Promise<RunOutcome> {
  const fresh = startWorker(env, crash.taskQueue, crash.stateDir, undefined, crash.workerEnv);
  try {
    return (await crash.handle.result()) as RunOutcome;
  } finally {
    await fresh.stop();
  }
}

/** Records in a group folder (shared by the workers that use it) naming `pid` as owner. */
function groupRecordsOwnedBy(dir: string, pid: number | undefined): string[] {
  return readdirSync(dir)
    .filter((name) => name.endsWith('.json'))
    .filter((name) => {
      try {
        return (JSON.parse(readFileSync(join(dir, name), 'utf8')) as { owner: { pid: number } }).owner.pid === pid;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false; // another worker's group ended meanwhile
        throw err;
      }
    });
}

const attemptsOf = async (crash: Crash, type: string) =>
  (await activityAttempts(crash.handle)).filter((a) => a.type === type).map((a) => a.attempt);
const entriesOf = (crash: Crash) => withLedger(crash.stateDir, (ledger) => ledger.entries(crash.runId));

describe('each crash window recovers on a fresh worker with exactly two writes and two receipts', () => {
  /**
   * Five windows run at once, each on its own queue, state folder and worker processes: each
   * waits out its killed activity's 10 s timeout, so one after another they took five times that.
   */
  const windows: [string, () => Promise<void>][] = [
    [
      'before_write: killed after the approval was recorded, before the write; the retry writes once',
      async () => {
        const crash = await runUntilFault('before_write');
        expect(crash.death).toEqual({ code: null, signal: 'SIGKILL' });
        expect(entriesOf(crash)).toBe(0); // no intent yet
        expect(crash.digestOf(ADDED_TEST)).toBe('absent');

        const outcome = await finishOnFreshWorker(crash);
        expect(finishedState(outcome, crash.stateDir, crash.runId)).toEqual(CLEAN_FINISH);
        expect(ledgerReceipts(crash.stateDir, crash.runId).map((r) => r.recovered)).toEqual([false, false]);
        expect(await attemptsOf(crash, 'writePatch')).toEqual([2, 1]);
      },
    ],
    [
      'after_temp_write: killed before the rename; recovery finds the target as before and writes it',
      async () => {
        const crash = await runUntilFault('after_temp_write');
        expect(crash.death).toEqual({ code: null, signal: 'SIGKILL' });
        expect(entriesOf(crash)).toBe(1); // the intent, no receipt
        expect(readdirSync(runPaths(crash.stateDir, crash.runId).tmp).filter((n) => n.endsWith('.tmp'))).toHaveLength(1);
        expect(crash.digestOf(ADDED_TEST)).toBe('absent');

        const outcome = await finishOnFreshWorker(crash);
        expect(finishedState(outcome, crash.stateDir, crash.runId)).toEqual(CLEAN_FINISH);
        expect(ledgerReceipts(crash.stateDir, crash.runId).map((r) => r.recovered)).toEqual([false, false]);
        expect(await attemptsOf(crash, 'writePatch')).toEqual([2, 1]);
      },
    ],
    [
      'after_rename: killed before the receipt; recovery only records the receipt, marked recovered',
      async () => {
        const crash = await runUntilFault('after_rename');
        expect(crash.death).toEqual({ code: null, signal: 'SIGKILL' });
        expect(entriesOf(crash)).toBe(1);
        const writtenDigest = crash.digestOf(ADDED_TEST);
        expect(writtenDigest).not.toBe('absent');

        const outcome = await finishOnFreshWorker(crash);
        expect(finishedState(outcome, crash.stateDir, crash.runId)).toEqual(CLEAN_FINISH);
        const receipts = ledgerReceipts(crash.stateDir, crash.runId);
        expect(receipts.map((r) => [r.path, r.recovered])).toEqual([
          [ADDED_TEST, true],
          [SOURCE, false],
        ]);
        expect(receipts[0].after).toBe(writtenDigest); // the file was not written a second time
        const written = traceIn(crash.stateDir, crash.runId)
          .filter((e) => e.type === 'action_written')
          .map((e) => e.data as { path: string; recovered: boolean });
        expect(written.map((d) => [d.path, d.recovered])).toEqual([
          [ADDED_TEST, true],
          [SOURCE, false],
        ]);
      },
    ],
    [
      'after_receipt: killed before the activity completed; the retry finds the receipt and writes nothing',
      async () => {
        const crash = await runUntilFault('after_receipt');
        expect(crash.death).toEqual({ code: null, signal: 'SIGKILL' });
        const atDeath = ledgerReceipts(crash.stateDir, crash.runId);
        expect(atDeath.map((r) => [r.path, r.recovered])).toEqual([[ADDED_TEST, false]]);
        expect(crash.digestOf(ADDED_TEST)).toBe(atDeath[0].after);

        const outcome = await finishOnFreshWorker(crash);
        expect(finishedState(outcome, crash.stateDir, crash.runId)).toEqual(CLEAN_FINISH);
        expect(await attemptsOf(crash, 'writePatch')).toEqual([2, 1]);
        expect(
          traceIn(crash.stateDir, crash.runId)
            .filter((e) => e.type === 'action_written')
            .map((e) => (e.data as { recovered: boolean }).recovered),
        ).toEqual([false, false]);
      },
    ],
    [
      'in_verifier: killed after the model said final; recovery re-enters the verifier and consumes no decision',
      async () => {
        const crash = await runUntilFault('in_verifier');
        expect(crash.death).toEqual({ code: null, signal: 'SIGKILL' });
        expect(ledgerReceipts(crash.stateDir, crash.runId)).toHaveLength(2);

        const outcome = await finishOnFreshWorker(crash);
        expect(finishedState(outcome, crash.stateDir, crash.runId)).toEqual(CLEAN_FINISH);
        const count = (type: string) => traceIn(crash.stateDir, crash.runId).filter((e) => e.type === type).length;
        // An uninterrupted canonical run asks once per decision of the replay.
        expect(count('model_requested')).toBe(CANONICAL_DECISIONS);
        // Each decision taken once, at its first attempt (a replay's decisions are local activities).
        expect([...(await attemptsOf(crash, 'decide')), ...(await attemptsOf(crash, 'localDecide'))]).toEqual(
          new Array(CANONICAL_DECISIONS).fill(1),
        );
        expect(await attemptsOf(crash, 'verify')).toEqual([2]);
        expect([count('verification_started'), count('verification_passed')]).toEqual([1, 1]);
      },
    ],
  ];

  it(`recovers in every window, the five at once: ${windows.map(([name]) => name.split(':')[0]).join(', ')}`, async () => {
    const settled = await Promise.allSettled(windows.map(([, body]) => body()));
    const failed = settled.flatMap((r, i) =>
      r.status === 'rejected' ? [`${windows[i][0]}\n${String((r.reason as Error)?.stack ?? r.reason)}`] : [],
    );
    if (failed.length > 0) throw new Error(failed.join('\n\n'));
  }, 300_000);

  /**
   * Alone, and with a group folder of its own: any other worker of this user (a fresh worker of
   * another window, or of a suite running beside this one) would reap the killed worker's test
   * tree, its owner being dead, before this test sees it. The folder is the default one under the
   * workers' own temporary folder, so both workers of the case share it as workers on one host do.
   */
  it('during_tests: killed while a test process tree runs; the orphaned tree is reaped and none of it remains', async () => {
    const marker = `4242.${process.pid}${Date.now() % 100_000}`;
    const hostTmp = tempDir('fault-host-tmp');
    const crash = await runUntilFault('during_tests', canonicalInput('canonical', { fixture: fixtureWithSleepingChild(marker) }), {
      TMPDIR: hostTmp,
    });
    expect(crash.death).toEqual({ code: null, signal: 'SIGKILL' });
    // The first test process of a run is the base's, before its first write.
    expect(ledgerReceipts(crash.stateDir, crash.runId)).toEqual([]);
    // The test tree outlives its worker: it runs in its own process group.
    await waitFor('the killed worker’s test child', async () => processesRunning(`sleep ${marker}`).length > 0, 15_000);
    const groupDir = join(hostTmp, basename(defaultProcessDir()));
    expect(groupRecordsOwnedBy(groupDir, crash.doomedPid)).toHaveLength(1); // recorded where only this case's workers look

    const outcome = await finishOnFreshWorker(crash);
    expect(finishedState(outcome, crash.stateDir, crash.runId)).toEqual(CLEAN_FINISH);
    expect(await attemptsOf(crash, 'baselineTests')).toEqual([2]); // the interrupted base run, retried
    expect(processesRunning(`sleep ${marker}`)).toEqual([]);
    expect(groupRecordsOwnedBy(groupDir, crash.doomedPid)).toEqual([]);
  });
});

describe('the third recovery state', () => {
  it('keeps an external edit made after the write was approved, and the model observes approval_stale', async () => {
    const stateDir = tempDir('agent-state');
    const taskQueue = uniqueQueue('stale');
    const worker = startWorker(env, taskQueue, stateDir);
    try {
      const handle = await startRun(env.client, canonicalInput('canonical', { approver: 'interactive' }), {
        taskQueue,
        workflowId: `${taskQueue}-run`,
      });
      const approve = (p: { action_id: string; args_digest: string; workspace_digest: string }) =>
        sendApproval(handle, {
          action_id: p.action_id,
          decision: 'approve',
          args_digest: p.args_digest,
          workspace_digest: p.workspace_digest,
          principal: 'user:test',
        });
      const first = await pendingApproval(handle);
      expect(first.path).toBe(ADDED_TEST);
      await approve(first);
      const second = await pendingApproval(handle, first.action_id);
      expect(second.path).toBe(SOURCE);

      // Someone fixes the file by hand while the approval is pending, then the write is approved.
      const file = join(workspaceOf(stateDir, handle.firstExecutionRunId), SOURCE);
      const edited = readFileSync(file, 'utf8').replace(
        'candidate = root / target\n',
        'candidate = document.parent / target  # fixed by hand\n',
      );
      writeFileSync(file, edited);
      await approve(second);

      const outcome = (await handle.result()) as RunOutcome;
      const observed = traceIn(stateDir, handle.firstExecutionRunId).find((e) => e.type === 'tool_observed' && e.call_id === 'fix-source');
      expect(observed?.data).toMatchObject({ ok: false, error: 'approval_stale', data: { action_id: second.action_id, path: SOURCE } });
      expect(
        traceIn(stateDir, handle.firstExecutionRunId).filter((e) => e.type === 'approval_recorded' && e.action_id === second.action_id),
      ).toHaveLength(1);
      expect(readFileSync(file, 'utf8')).toBe(edited);
      // The hand-made fix is what the verifier then checks, and it passes.
      expect(outcome.record).toMatchObject({ status: 'completed', writes: 1, receipts: 1, tool_errors: { approval_stale: 1 } });
      expect(withLedger(stateDir, (l) => [l.hasIntent(second.action_id), l.receipt(second.action_id)])).toEqual([false, null]);
      expect(ledgerReceipts(stateDir, handle.firstExecutionRunId).map((r) => r.path)).toEqual([ADDED_TEST]);
    } finally {
      await worker.stop();
    }
  });

  it('stops as recovery_uncertain without writing when the target matches neither before nor after', async () => {
    const crash = await runUntilFault('after_temp_write');
    expect(crash.death).toEqual({ code: null, signal: 'SIGKILL' });
    expect(entriesOf(crash)).toBe(1); // the intent is recorded: a retry is a recovery
    const file = join(crash.workspace, ADDED_TEST);
    const foreign = '# written by someone else while the worker was down\n';
    writeFileSync(file, foreign);

    const outcome = await finishOnFreshWorker(crash);
    expect(outcome.record).toMatchObject({ status: 'failed', reason: 'recovery_uncertain', writes: 0, receipts: 0 });
    expect(readFileSync(file, 'utf8')).toBe(foreign);
    expect(ledgerReceipts(crash.stateDir, crash.runId)).toEqual([]);
    expect(traceIn(crash.stateDir, crash.runId).filter((e) => e.type === 'action_written')).toEqual([]);
  });
});

describe('orphaned test process groups', () => {
  /**
   * A separate Node process that runs `sleep <marker>` through a LocalBackend recording into
   * `dir`; with AGENT_FAULT=during_tests it SIGKILLs itself right after the group is recorded.
   */
  function backendOwner(dir: string, marker: string, fault: boolean) {
    const script = `
      const { LocalBackend } = require(${JSON.stringify(join(__dirname, '..', 'sandbox', 'backends', 'local.js'))});
      require(${JSON.stringify(join(__dirname, '..', 'host', 'faults.js'))}).armFault(${fault ? "'during_tests'" : 'null'});
      const out = require('node:fs').mkdtempSync(require('node:path').join(require('node:os').tmpdir(), 'owner-'));
      new LocalBackend({ processDir: ${JSON.stringify(dir)}, path: ${JSON.stringify(hostPath(SETTINGS))} }).exec({
        argv: ['sleep', ${JSON.stringify(marker)}], workspaceDir: out, workspaceReadOnly: false, outDir: out,
        timeoutMs: 600000, outputCapBytes: 1000, signal: new AbortController().signal,
      });`;
    const child = spawn(process.execPath, ['-e', script], {
      stdio: 'ignore',
    });
    const exit = new Promise<NodeJS.Signals | null>((resolve) => child.once('exit', (_code, signal) => resolve(signal)));
    return { child, exit };
  }

  const records = (dir: string) => readdirSync(dir).filter((n) => n.endsWith('.json'));

  it('kills the group of a dead owner, never the group of a live owner or a stranger that reuses a recorded id', async () => {
    const dir = tempDir('agent-groups');
    const groups = new ProcessGroups(dir);
    const stamp = `${process.pid}${Date.now() % 100_000}`;
    const [orphanSleep, ownedSleep, strangerSleep] = ['1', '2', '3'].map((n) => `sleep 4343.${stamp}${n}`);

    // The live owner goes first: a backend reaps before it spawns, and it must not see the orphan yet.
    const alive = backendOwner(dir, ownedSleep.slice(6), false);
    try {
      await waitFor('the live owner’s group', async () => records(dir).length === 1 && processesRunning(ownedSleep).length === 1, 15_000);
      const dead = backendOwner(dir, orphanSleep.slice(6), true);
      expect(await dead.exit).toBe('SIGKILL');
      await waitFor('the orphan', async () => processesRunning(orphanSleep).length === 1, 5_000);
      expect(records(dir)).toHaveLength(2);

      // A record naming a group that is not ours: a dead owner, but no process carries the token.
      const stranger = spawn('sleep', [strangerSleep.slice(6)], { detached: true, stdio: 'ignore' });
      const forged = { pgid: stranger.pid, token: randomUUID(), owner: { pid: dead.child.pid, start: 1 }, command: 'sleep' };
      writeFileSync(join(dir, `${stranger.pid}-${forged.token}.json`), JSON.stringify(forged));

      const reaped = groups.reapOrphans();
      expect(reaped).toHaveLength(1);
      await waitFor('the orphan to end', async () => processesRunning(orphanSleep).length === 0, 5_000);
      expect(processesRunning(ownedSleep)).toHaveLength(1);
      expect(processesRunning(strangerSleep)).toHaveLength(1);
      expect(records(dir)).toHaveLength(1); // the live owner's; the dead and the forged record are gone
      stranger.kill('SIGKILL');
    } finally {
      alive.child.kill('SIGKILL');
      await alive.exit;
      groups.reapOrphans(); // the owner just died: its sleep goes too
    }
    await waitFor('the live owner’s group to end once its owner died', async () => processesRunning(ownedSleep).length === 0, 5_000);
    expect(records(dir)).toEqual([]);
  });
});
