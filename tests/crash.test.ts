import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { sha256 } from '../host/digest';
import { Ledger } from '../store/ledger';
import { runPaths } from '../workspace/workspace';
import { tempDir } from './helpers/run-dir';
import { approveAll, canonicalInput, killed, pendingApproval, spawnWorker, startServer, uniqueQueue } from './helpers/temporal';
import { startRun } from '../client/run-access';
import type { RunOutcome } from '../core/run-view';

let env: TestWorkflowEnvironment;
beforeAll(async () => {
  env = await startServer();
});
afterAll(async () => {
  await env?.teardown();
});

describe('a run survives its worker process dying', () => {
  it('completes with exactly two writes after the worker is killed while waiting for approval', async () => {
    const stateDir = tempDir('agent-state');
    const taskQueue = uniqueQueue('crash');
    const first = spawnWorker(env, taskQueue, stateDir);
    const handle = await startRun(env.client, canonicalInput('canonical', { approver: 'interactive' }), {
      taskQueue,
      workflowId: `${taskQueue}-run`,
    });
    const pending = await pendingApproval(handle);
    expect(pending.path).toBe('tests/test_agent_nested.py');

    first.kill('SIGKILL');
    await killed(first);

    const second = spawnWorker(env, taskQueue, stateDir);
    try {
      await approveAll(handle);
      const outcome = (await handle.result()) as RunOutcome;
      expect(outcome.record).toMatchObject({ status: 'completed', writes: 2, receipts: 2 });
      const ledger = new Ledger(join(stateDir, 'ledger.sqlite'));
      const receipts = ledger.receipts(handle.firstExecutionRunId);
      ledger.close();
      expect(receipts).toHaveLength(2);
      const workspace = runPaths(stateDir, handle.firstExecutionRunId).workspace;
      for (const r of receipts) expect(sha256(readFileSync(join(workspace, r.path)))).toBe(r.after);
    } finally {
      second.kill('SIGTERM');
      await killed(second);
    }
  });
});
