/**
 * docs/temporal-cli.md ("The same with the `temporal` CLI alone"), run as written: each of its shell
 * blocks in order, in a fresh bash with only TEMPORAL_ADDRESS (and a private state folder) set, the
 * worker block in the background. Nothing else drives the run.
 */
import { execFile, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { queryState, runHandle, runOutcome } from '../client/run-access';
import { PROJECT_ROOT, tempDir } from './helpers/run-dir';
import { CANONICAL_RECORD, killed, startServer, waitFor } from './helpers/temporal';

const exec = promisify(execFile);

/** The shell blocks of the section, in order. */
function sectionBlocks(): string[] {
  const section = readFileSync(join(PROJECT_ROOT, 'docs', 'temporal-cli.md'), 'utf8');
  return [...section.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]);
}

let env: TestWorkflowEnvironment;
beforeAll(async () => {
  env = await startServer();
});
afterAll(async () => {
  await env?.teardown();
});

it('works verbatim in a fresh shell: start, state, two approvals, list, trace and history', async () => {
  const blocks = sectionBlocks();
  expect(blocks).toHaveLength(5);
  const shellEnv = {
    PATH: process.env.PATH!,
    HOME: process.env.HOME ?? '/tmp',
    TEMPORAL_ADDRESS: env.address,
    AGENT_STATE_DIR: tempDir('cli-section-state'),
    TMPDIR: tempDir('cli-section-tmp'),
  };
  const sh = (script: string) => exec('bash', ['-e', '-c', script], { cwd: PROJECT_ROOT, env: shellEnv, maxBuffer: 64 * 1024 * 1024 });

  const worker = spawn('bash', ['-c', blocks[0]], { cwd: PROJECT_ROOT, env: shellEnv, stdio: 'ignore', detached: true });
  try {
    await sh(blocks[1]);
    const handle = runHandle(env.client, 'demo-1');
    const state = JSON.parse((await sh(blocks[2])).stdout);
    expect(state.queryResult[0]).toMatchObject({ approver: 'interactive', segment: 1 });
    let approved: string | undefined;
    for (const _write of [1, 2]) {
      const pending = await waitFor('a pending write', async () => {
        const v = await queryState(handle);
        return v.status === 'awaiting_approval' && v.pending_approval!.action_id !== approved ? v.pending_approval : null;
      });
      await sh(blocks[3]);
      approved = pending!.action_id;
    }
    const outcome = await waitFor('the run to end', async () =>
      (await handle.describe()).status.name === 'COMPLETED' ? runOutcome(handle) : null,
    );
    expect(outcome.record).toMatchObject(CANONICAL_RECORD);
    // Visibility is eventually consistent: the list shows the run once it is indexed.
    const last = await waitFor('the list to show the run', async () => {
      const { stdout } = await sh(blocks[4]);
      return stdout.split('\n').some((l) => l.includes('demo-1') && l.includes('agentRun')) ? stdout : null;
    });
    expect(last).toContain('EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED');
  } finally {
    if (worker.pid) process.kill(-worker.pid, 'SIGTERM');
    await killed(worker);
  }
}, 300_000);
