import { execFile, execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { temporalBinary } from '../host/temporal-bin';
import type { RunInput } from '../core/contracts';
import type { TraceEvent } from '../core/trace';
import { LINKCHECK, tempDir, writeFiles, SETTINGS } from './helpers/run-dir';
import {
  approveAll,
  canonicalInput,
  pendingApproval,
  runOnce,
  startServer,
  waitFor,
  writeReplay,
  type RunOnceOptions,
} from './helpers/temporal';
import { queryState, sendApproval, sendInterrupt, sendSteer } from '../client/run-access';

let env: TestWorkflowEnvironment;
beforeAll(async () => {
  env = await startServer();
});
afterAll(async () => {
  await env?.teardown();
});

const run = (input: RunInput, drive?: RunOnceOptions['drive'], prepareState?: RunOnceOptions['prepareState']) =>
  runOnce(env, input, { drive, prepareState });

const runTests = (id: string) => ({ kind: 'tool', call: { call_id: id, name: 'run_tests', arguments: { preset: 'candidate_tests' } } });
const MARKER = 'agent-sleep-marker';

/** A fixture whose only test starts a child process and sleeps far past any limit. */
function sleepyFixture(): string {
  const dir = tempDir('sleepy');
  writeFiles(dir, {
    'fixture.json': JSON.stringify({
      schema_version: 1,
      id: 'sleepy',
      task: 'Wait.',
      writable: [],
      new_files: [],
      tests: { command: ['python3', '-m', 'pytest', '-q', '-p', 'no:cacheprovider', 'tests'], format: 'pytest', timeout_s: 300 },
      acceptance: { command: ['python3', '-c', 'print(1)'], timeout_s: 10 },
      budgets: { max_turns: 10, max_tool_calls: 10, deadline_s: 600, call_timeout_s: 300 },
    }),
    'repo/tests/test_sleep.py': `import subprocess, time\n\ndef test_sleep():\n    subprocess.Popen(["bash", "-c", "exec -a ${MARKER} sleep 300"])\n    time.sleep(300)\n`,
    'acceptance/expected.json': JSON.stringify({ schema_version: 1, cases: {} }),
  });
  mkdirSync(join(dir, 'replays'));
  return dir;
}

/** The result of `callId` must be the harness's synthesized one, right before run_finished. */
function expectSynthesized(trace: TraceEvent[], callId: string, runEnd: string): void {
  const results = trace.filter((e) => e.type === 'tool_observed' && e.call_id === callId);
  expect(results).toHaveLength(1);
  expect(results[0].data).toMatchObject({ ok: false, error: 'interrupted', data: { run_end: runEnd } });
  expect(trace[trace.indexOf(results[0]) + 1]).toMatchObject({ type: 'run_finished' });
}

const sleepersLeft = () =>
  execFileSync('ps', ['-eo', 'args'], { encoding: 'utf8' })
    .split('\n')
    .filter((l) => l.startsWith(MARKER));

describe('stops', () => {
  it('ends at max_tool_calls with budget_exhausted', async () => {
    const path = writeReplay([runTests('a'), runTests('b'), runTests('c'), { kind: 'final', text: 'x' }]);
    const { outcome } = await run(
      canonicalInput('canonical', { source: { kind: 'replay', path, trusted: true }, budgets: { max_tool_calls: 2 } }),
    );
    expect(outcome.record).toMatchObject({ status: 'budget_exhausted', reason: 'max_tool_calls' });
    expect(outcome.state.counters.tool_calls).toBe(2);
  });

  it('ends at the deadline with budget_exhausted and kills the running test process tree', async () => {
    const fixture = sleepyFixture();
    const path = writeReplay([runTests('sleep'), { kind: 'final', text: 'x' }]);
    const { outcome, trace } = await run(
      { fixture, source: { kind: 'replay', path, trusted: true }, approver: 'policy:approve-writable', budgets: { deadline_s: 6 } },
      () => waitFor('the test process to run', async () => sleepersLeft().length > 0, 6_000),
    );
    expect(outcome.record).toMatchObject({ status: 'budget_exhausted', reason: 'deadline' });
    expect(outcome.state.deadline_reached).toBe(true);
    expectSynthesized(trace, 'sleep', 'deadline');
    await waitFor('the sleeping test tree to be gone', async () => sleepersLeft().length === 0, 10_000);
  });

  it('is cancelled with `temporal workflow cancel`, killing the running test process tree', async () => {
    const fixture = sleepyFixture();
    const path = writeReplay([runTests('sleep'), { kind: 'final', text: 'x' }]);
    const { outcome, trace } = await run(
      { fixture, source: { kind: 'replay', path, trusted: true }, approver: 'policy:approve-writable' },
      async (h) => {
        await waitFor('the test process to run', async () => sleepersLeft().length > 0, 30_000);
        await promisify(execFile)(temporalBinary(SETTINGS), [
          'workflow',
          'cancel',
          '--address',
          env.address,
          '--workflow-id',
          h.workflowId,
        ]);
      },
    );
    expect(outcome.record).toMatchObject({ status: 'cancelled', reason: 'cancelled' });
    expect(outcome.state.deadline_reached).toBe(false);
    // The cancelled call was not left without a result, and nothing half done remains.
    expect(trace.at(-1)).toMatchObject({ type: 'run_finished', data: { status: 'cancelled' } });
    expectSynthesized(trace, 'sleep', 'cancelled');
    await waitFor('the sleeping test tree to be gone', async () => sleepersLeft().length === 0, 10_000);
  });

  it('reports a missing test runtime as an infrastructure error, never as no tests', async () => {
    const fixture = sleepyFixture();
    const config = JSON.parse(require('node:fs').readFileSync(join(fixture, 'fixture.json'), 'utf8'));
    config.tests.command = ['python3-is-not-installed', '-m', 'pytest'];
    writeFileSync(join(fixture, 'fixture.json'), JSON.stringify(config));
    const path = writeReplay([runTests('missing'), { kind: 'final', text: 'x' }]);
    const { outcome, trace } = await run({ fixture, source: { kind: 'replay', path, trusted: true }, approver: 'policy:approve-writable' });
    expect(outcome.record).toMatchObject({ status: 'failed', reason: 'infrastructure_error' });
    expect(outcome.state.detail).toBe('runtime not found: python3-is-not-installed');
    // The call still has its one result, made by the harness and not counted as a tool error.
    expectSynthesized(trace, 'missing', 'infrastructure_error');
    expect(outcome.record.tool_errors).toEqual({});
  });

  it('does not count time waiting for a person against the deadline, and its timer does not run meanwhile', async () => {
    let waited: { fired: number; cancelled: number } | undefined;
    const { outcome } = await run(canonicalInput('canonical', { approver: 'interactive', budgets: { deadline_s: 8 } }), async (h) => {
      await pendingApproval(h);
      await new Promise((r) => setTimeout(r, 10_000)); // longer than the whole deadline
      const events = (await h.fetchHistory()).events!;
      waited = {
        fired: events.filter((e) => e.timerFiredEventAttributes).length,
        cancelled: events.filter((e) => e.timerCanceledEventAttributes).length,
      };
      await approveAll(h);
    });
    expect(outcome.record).toMatchObject({ status: 'completed', writes: 2 });
    expect(outcome.state.deadline_reached).toBe(false);
    // The wait cancelled the deadline's timer; none fired in a wait longer than the deadline.
    expect(waited).toEqual({ fired: 0, cancelled: 1 });
  });

  it('ends a write nobody approves at approval_timeout_s, with its own reason, the call answered', async () => {
    const { outcome, trace } = await run(canonicalInput('canonical', { approver: 'interactive', budgets: { approval_timeout_s: 2 } }));
    expect(outcome.record).toMatchObject({ status: 'budget_exhausted', reason: 'approval_timeout', writes: 0 });
    expect(outcome.state.detail).toBe('no approval for tests/test_agent_nested.py within 2 s');
    expectSynthesized(trace, 'add-test', 'approval_timeout');
  });

  it('interrupt gives the pending call an interrupted result; steer reaches the next decision', async () => {
    const { outcome, trace } = await run(canonicalInput('canonical', { approver: 'interactive' }), async (h) => {
      const first = await pendingApproval(h);
      expect(first.path).toBe('tests/test_agent_nested.py');
      await sendSteer(h, 'skip the new test, fix the source', 'test:steer');
      await sendInterrupt(h, 'changed my mind', 'test:interrupt');
      await approveAll(h);
    });
    const observed = trace.find((e) => e.type === 'tool_observed' && e.call_id === 'add-test')!;
    expect(observed.data).toMatchObject({ ok: false, error: 'interrupted', data: { reason: 'not executed: changed my mind' } });
    const next = trace.find((e) => e.type === 'model_requested' && e.seq > observed.seq)!;
    expect(next.data).toMatchObject({ messages: ['skip the new test, fix the source'] });
    expect(outcome.record).toMatchObject({
      status: 'completed',
      writes: 1,
      diff_paths: ['src/linkcheck.py'],
      tool_errors: { interrupted: 1 },
    });
  });

  it('takes a message a retrying client delivers twice once: the same message id is ignored the second time', async () => {
    const { outcome, trace, transcript } = await run(canonicalInput('canonical', { approver: 'interactive' }), async (h) => {
      const first = await pendingApproval(h);
      // One steer sent twice (a client retrying after a lost answer), then a second, different one.
      await sendSteer(h, 'prefer a minimal fix', 'cli-test:steer-1');
      await sendSteer(h, 'prefer a minimal fix', 'cli-test:steer-1');
      await sendSteer(h, 'prefer a minimal fix', 'cli-test:steer-2');
      // One approval sent twice with its message id: recorded once, the repeat not even ignored.
      const approval = {
        action_id: first.action_id,
        decision: 'approve' as const,
        args_digest: first.args_digest,
        workspace_digest: first.workspace_digest,
        principal: 'user:test',
        message_id: 'cli-test:approve-1',
      };
      await sendApproval(h, approval);
      await sendApproval(h, approval);
      await pendingApproval(h, first.action_id);
      await approveAll(h);
    });
    expect(outcome.record).toMatchObject({ status: 'completed', writes: 2 });
    expect(trace.filter((e) => e.type === 'steer_received').map((e) => e.data)).toEqual([
      { message: 'prefer a minimal fix' },
      { message: 'prefer a minimal fix' },
    ]);
    expect(transcript.filter((e) => 'message' in e)).toEqual([{ message: 'prefer a minimal fix' }, { message: 'prefer a minimal fix' }]);
    const first = trace.find((e) => e.type === 'approval_requested')!;
    expect(
      trace
        .filter((e) => e.action_id === first.action_id && (e.type === 'approval_recorded' || e.type === 'approval_ignored'))
        .map((e) => e.type),
    ).toEqual(['approval_recorded']);
  });
});

describe('special files left in the workspace', () => {
  it('undoes a FIFO and a socket a test leaves behind, never opening them, reports each test run that left them, and ends promptly', async () => {
    const fixture = join(tempDir('special'), 'fixture');
    require('node:fs').cpSync(LINKCHECK, fixture, { recursive: true });
    writeFiles(join(fixture, 'repo'), {
      'tests/test_special.py':
        'import os, socket\n\n\ndef test_leaves_special_files():\n    os.mkfifo("left.fifo")\n    s = socket.socket(socket.AF_UNIX)\n    s.bind("left.sock")\n    assert True\n',
    });
    const path = writeReplay([
      runTests('make-specials'),
      { kind: 'tool', call: { call_id: 'diff', name: 'show_diff', arguments: {} } },
      { kind: 'final', text: 'x' },
    ]);
    const { outcome, trace } = await run({ fixture, source: { kind: 'replay', path, trusted: true }, approver: 'policy:approve-writable' });
    // The candidate tests pass; the hidden cases fail (nothing was fixed). No by-product is verified.
    expect(outcome.record).toMatchObject({
      status: 'failed',
      reason: 'verification_failed',
      writes: 0,
      diff_paths: [],
      unreceipted_changes: 2,
    });
    expect(outcome.state.verification!.protected_changed).toEqual([]);
    expect(trace.filter((e) => e.type === 'unreceipted_change').map((e) => [e.call_id, e.data])).toEqual([
      ['make-specials', { step: 'run_tests', paths: ['left.fifo', 'left.sock'], count: 2 }],
      [undefined, { step: 'verifier_tests', paths: ['left.fifo', 'left.sock'], count: 2 }],
    ]);
    const diff = trace.find((e) => e.type === 'tool_observed' && e.call_id === 'diff')!.data as { data: { diff: string; paths: string[] } };
    expect(diff.data).toEqual({ diff: '', paths: [] });
  });
});

describe('failures that would repeat on every attempt', () => {
  it('ends at once with infrastructure_error on a permission error of the host file system, never retrying it', async () => {
    let stateDir = '';
    let control = '';
    const mounted = () => execFileSync('findmnt', ['-n', '-o', 'TARGET', '--target', control], { encoding: 'utf8' }).trim() === control;
    const { outcome, trace, handle } = await run(
      canonicalInput('canonical', { approver: 'interactive' }),
      async (h, running) => {
        const first = await pendingApproval(h);
        // The run's control folder (temporary files of writes) turns read-only under the worker.
        control = join(stateDir, 'runs', (await queryState(h)).run_id, 'control');
        execFileSync('mount', ['--bind', control, control]);
        try {
          execFileSync('mount', ['-o', 'remount,ro,bind', control]);
          await sendApproval(h, {
            action_id: first.action_id,
            decision: 'approve',
            args_digest: first.args_digest,
            workspace_digest: first.workspace_digest,
          });
          await waitFor('the run to end', async () => !running(), 30_000);
        } finally {
          execFileSync('umount', [control]);
        }
      },
      (dir) => (stateDir = dir),
    );
    expect(mounted()).toBe(false);
    expect(outcome.record).toMatchObject({ status: 'failed', reason: 'infrastructure_error', writes: 0 });
    expect(outcome.state.detail).toMatch(/^writePatch: EROFS: read-only file system/);
    expectSynthesized(trace, 'add-test', 'infrastructure_error');
    // One attempt of each activity: the failure was not retried.
    const events = (await handle.fetchHistory()).events!;
    expect(events.filter((e) => e.activityTaskFailedEventAttributes)).toHaveLength(1);
    expect(events.filter((e) => (e.activityTaskStartedEventAttributes?.attempt ?? 1) !== 1)).toEqual([]);
  });
});
