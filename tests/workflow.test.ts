import { cpSync, existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { buildId } from '../host/build';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Ledger } from '../store/ledger';
import { runPaths } from '../workspace/workspace';
import { LINKCHECK, tempDir } from './helpers/run-dir';
import {
  approveAll,
  CANONICAL_RECORD,
  canonicalInput,
  pendingApproval,
  runOnce,
  startServer,
  uniqueQueue,
  waitFor,
  writeReplay,
  type RunOnceOptions,
} from './helpers/temporal';
import { Worker } from '@temporalio/worker';
import type { temporal } from '@temporalio/proto';
import { createWorker, workflowBundle } from '../worker';
import { workerTelemetry } from '../worker/telemetry';
import { querySnapshot, sendApproval } from '../client/run-access';
import type { RunOutcome } from '../core/run-view';

let env: TestWorkflowEnvironment;
beforeAll(async () => {
  env = await startServer();
});
afterAll(async () => {
  await env?.teardown();
});

const run = (input: object, opts?: RunOnceOptions) => runOnce(env, input, opts);

describe('agentRun on a real Temporal server', () => {
  it('completes the canonical replay with approvals given through the real Signal', async () => {
    const { outcome, trace, receipts, transcript } = await run(canonicalInput('canonical', { approver: 'interactive' }), {
      drive: (h) => approveAll(h),
    });
    expect(outcome.record).toEqual(CANONICAL_RECORD);
    // The run names the build that ran it, in its state and its last event, never in its record.
    expect(outcome.state.builds).toEqual([buildId()]);
    expect(trace.at(-1)).toMatchObject({ type: 'run_finished', data: { builds: [buildId()] } });
    // The host-side transcript: every decision in order, each tool call with its one result.
    const replay = JSON.parse(readFileSync(join(LINKCHECK, 'replays', 'canonical.json'), 'utf8')).decisions;
    expect(transcript.map((e) => ('decision' in e ? e.decision : e))).toEqual(replay);
    for (const e of transcript) {
      if (!('decision' in e) || e.decision.kind !== 'tool') continue;
      expect(e.result).toMatchObject({ call_id: (e.decision.call as { call_id: string }).call_id });
    }
    expect(receipts.map((r) => r.path)).toEqual(['tests/test_agent_nested.py', 'src/linkcheck.py']);

    // Exactly one red run_tests before the source fix.
    const firstSourceWrite = trace.find((e) => e.type === 'action_written' && (e.data as { path: string }).path === 'src/linkcheck.py')!;
    const redBefore = trace.filter(
      (e) => e.type === 'tool_observed' && (e.data as { error: string }).error === 'tests_failed' && e.seq < firstSourceWrite.seq,
    );
    expect(redBefore).toHaveLength(1);

    // The causal order of the key events, and strictly increasing seq from 1.
    expect(trace.map((e) => e.seq)).toEqual(trace.map((_, i) => i + 1));
    const order = [
      'model_requested',
      'tool_proposed',
      'approval_requested',
      'approval_recorded',
      'action_written',
      'action_receipt',
      'verification_started',
      'verification_passed',
    ];
    let at = 0;
    for (const type of order) {
      const found = trace.findIndex((e, i) => i >= at && e.type === type);
      expect({ type, found: found >= 0 }).toEqual({ type, found: true });
      at = found + 1;
    }
    const approvals = trace.filter((e) => e.type === 'approval_recorded');
    expect(approvals.map((e) => (e.data as { principal: string }).principal)).toEqual(['user:test', 'user:test']);
    expect(JSON.stringify(trace)).not.toContain(LINKCHECK); // no absolute host paths
  });

  it('fails the always-empty implementation on acceptance although its tests pass', async () => {
    const { outcome } = await run(canonicalInput('always-empty'));
    expect(outcome.record.status).toBe('failed');
    expect(outcome.record.reason).toBe('verification_failed');
    expect(outcome.record.acceptance!.failed).toContain('nested_missing');
    expect(outcome.record.candidate_tests).toEqual({ discovered: 2, passed: 2, failed: 0 });
  });

  it('never completes a final with no work', async () => {
    const { outcome, trace } = await run(canonicalInput('no-work'));
    expect(outcome.record.status).not.toBe('completed');
    expect(outcome.record.writes).toBe(0);
    expect(trace.some((e) => e.type === 'verification_started')).toBe(true);
  });

  it('refuses an untrusted replay on the local backend before creating the workspace', async () => {
    const input = canonicalInput('canonical');
    const { outcome, stateDir, runId } = await run({ ...input, source: { ...input.source, trusted: false } });
    expect(outcome.record).toMatchObject({ status: 'failed', reason: 'replay_untrusted', writes: 0 });
    expect(existsSync(runPaths(stateDir, runId).root)).toBe(false);
  });

  it('records and ignores approvals with wrong digests or for no pending action, and writes once', async () => {
    const { outcome, trace, receipts } = await run(canonicalInput('canonical', { approver: 'interactive' }), {
      drive: async (h) => {
        const first = await pendingApproval(h);
        await sendApproval(h, {
          action_id: first.action_id,
          decision: 'approve',
          args_digest: '0'.repeat(64),
          workspace_digest: first.workspace_digest,
        });
        await sendApproval(h, {
          action_id: first.action_id,
          decision: 'approve',
          args_digest: first.args_digest,
          workspace_digest: first.workspace_digest,
          principal: 'user:a',
        });
        // The same approval again, after it was accepted: recorded as ignored.
        await sendApproval(h, {
          action_id: first.action_id,
          decision: 'approve',
          args_digest: first.args_digest,
          workspace_digest: first.workspace_digest,
          principal: 'user:a',
        });
        await approveAll(h);
      },
    });
    expect(outcome.record.status).toBe('completed');
    expect(outcome.record.writes).toBe(2);
    expect(receipts).toHaveLength(2);
    const ignored = trace.filter((e) => e.type === 'approval_ignored').map((e) => (e.data as { reason: string }).reason);
    expect(ignored).toEqual(['digests do not match the pending action', 'no approval is pending']);
  });

  it('lets the model observe a rejection as approval_rejected and writes nothing for it', async () => {
    const { outcome, trace } = await run(canonicalInput('canonical', { approver: 'interactive' }), {
      drive: async (h) => {
        const first = await pendingApproval(h);
        await sendApproval(h, {
          action_id: first.action_id,
          decision: 'reject',
          args_digest: first.args_digest,
          workspace_digest: first.workspace_digest,
          reason: 'not this test',
        });
        await approveAll(h);
      },
    });
    const observed = trace.find((e) => e.type === 'tool_observed' && e.call_id === 'add-test')!;
    expect(observed.data).toMatchObject({ ok: false, error: 'approval_rejected', data: { reason: 'not this test' } });
    expect(outcome.record.tool_errors.approval_rejected).toBe(1);
    // Without the rejected test file there is no red run and only the source fix is written.
    expect(outcome.record).toMatchObject({ writes: 1, red_observed: false, diff_paths: ['src/linkcheck.py'] });
  });

  it('retries transient model errors at most twice, then fails with model_error', async () => {
    const retried = await run(
      canonicalInput('canonical', {
        source: {
          kind: 'replay',
          trusted: true,
          path: writeReplay([
            { kind: 'model_error', transient: true },
            { kind: 'model_error', transient: true },
            { kind: 'final', text: 'done' },
          ]),
        },
      }),
    );
    expect(retried.trace.filter((e) => e.type === 'model_retry')).toHaveLength(2);
    expect(retried.outcome.record.reason).toBe('verification_failed');

    const three = await run(
      canonicalInput('canonical', {
        source: { kind: 'replay', trusted: true, path: writeReplay([1, 2, 3].map(() => ({ kind: 'model_error', transient: true }))) },
      }),
    );
    expect(three.outcome.record).toMatchObject({ status: 'failed', reason: 'model_error' });

    const permanent = await run(
      canonicalInput('canonical', {
        source: { kind: 'replay', trusted: true, path: writeReplay([{ kind: 'model_error', transient: false }]) },
      }),
    );
    expect(permanent.outcome.record).toMatchObject({ status: 'failed', reason: 'model_error' });
    expect(permanent.trace.filter((e) => e.type === 'model_retry')).toHaveLength(0);
  });

  it('counts turns, tool calls, repeated identical calls (none across a write) and empty replies in the record', async () => {
    const canonical = JSON.parse(readFileSync(join(LINKCHECK, 'replays', 'canonical.json'), 'utf8')).decisions as {
      call?: { call_id: string };
    }[];
    const step = (id: string) => canonical.find((d) => d.call?.call_id === id)!;
    const read = (id: string, args: object) => ({
      kind: 'tool',
      call: { call_id: id, name: 'read_file', arguments: { path: 'src/linkcheck.py', ...args } },
    });
    const path = writeReplay([
      { kind: 'plan', text: '  ' },
      read('r1', {}),
      read('r2', {}), // repeated
      read('r3', { start: 1 }), // other arguments: not repeated
      read('r4', {}), // repeated
      step('add-test'), // a write: what comes after is asked of a changed workspace
      read('r5', {}),
      read('r6', { start: 1 }),
      read('r7', { start: 1 }), // repeated
      { kind: 'final', text: '' },
    ]);
    const { outcome } = await run(canonicalInput('canonical', { source: { kind: 'replay', trusted: true, path } }));
    expect(outcome.record).toMatchObject({
      status: 'failed',
      reason: 'verification_failed',
      turns: 10,
      tool_calls: 8,
      repeated_calls: 3,
      empty_replies: 2,
      trace_id: null,
    });
    expect(outcome.state.counters).toMatchObject({ repeated_calls: 3, empty_replies: 2 });
  });

  it('fails with replay_exhausted when the decisions run out', async () => {
    const { outcome } = await run(
      canonicalInput('canonical', { source: { kind: 'replay', trusted: true, path: writeReplay([{ kind: 'plan', text: 'think' }]) } }),
    );
    expect(outcome.record).toMatchObject({ status: 'failed', reason: 'replay_exhausted' });
  });

  it('stops at max_turns with budget_exhausted after a wrap-up turn without tools', async () => {
    const path = writeReplay([
      { kind: 'plan', text: 'one' },
      { kind: 'plan', text: 'two' },
      { kind: 'final', text: 'summary of what was done' },
    ]);
    const { outcome, trace } = await run(
      canonicalInput('canonical', { source: { kind: 'replay', trusted: true, path }, budgets: { max_turns: 2 } }),
    );
    expect(outcome.record).toMatchObject({ status: 'budget_exhausted', reason: 'max_turns' });
    expect(outcome.state.wrap_up).toBe('summary of what was done');
    expect(trace.filter((e) => e.type === 'model_requested').at(-1)!.data).toMatchObject({ tools_enabled: false });
  });

  it('ends a fixture with a malformed expected.json at once, invalid_input, before any workspace', async () => {
    const fixture = join(tempDir('bad-expected'), 'fixture');
    cpSync(LINKCHECK, fixture, { recursive: true });
    writeFileSync(join(fixture, 'acceptance', 'expected.json'), '{"schema_version": 1, "cases": ');
    const { outcome, stateDir } = await run(
      canonicalInput('canonical', {
        fixture,
        source: { kind: 'replay', path: join(LINKCHECK, 'replays', 'canonical.json'), trusted: true },
      }),
    );
    expect(outcome.record).toMatchObject({ status: 'failed', reason: 'invalid_input', writes: 0 });
    expect(outcome.state.detail).toMatch(/^acceptance\/expected\.json is not JSON/);
    expect(existsSync(join(stateDir, 'runs'))).toBe(false);
  });

  it('counts receipts from the ledger, so a receipt the ledger does not hold shows as a gap', async () => {
    const { outcome, receipts, trace } = await run(canonicalInput('canonical'), {
      prepareState: (stateDir) => {
        // A ledger that drops every receipt: the writes happen, their receipts never arrive.
        const ledger = new Ledger(join(stateDir, 'ledger.sqlite'));
        ledger.close();
        const db = new (require('better-sqlite3'))(join(stateDir, 'ledger.sqlite'));
        db.exec(`CREATE TRIGGER drop_receipts BEFORE INSERT ON receipts BEGIN SELECT RAISE(IGNORE); END;`);
        db.close();
      },
    });
    expect(receipts).toEqual([]);
    expect(outcome.record).toMatchObject({ status: 'completed', writes: 2, receipts: 0 });
    expect(trace.filter((e) => e.type === 'action_receipt')).toEqual([]);
  });

  it('keeps the ledger outside the workspace', async () => {
    const { stateDir, runId } = await run(canonicalInput('always-empty'));
    const ledger = new Ledger(join(stateDir, 'ledger.sqlite'));
    expect(ledger.receipts(runId)).toHaveLength(1);
    ledger.close();
    expect(existsSync(join(runPaths(stateDir, runId).workspace, 'ledger.sqlite'))).toBe(false);
  });

  it('runs the base tests of each state folder itself: two workers of one process over two folders, one fixture, at once', async () => {
    // Every test process of this fixture says it is there, then waits for the test's go.
    const dir = join(tempDir('shared-base'), 'linkcheck-nested');
    cpSync(LINKCHECK, dir, { recursive: true });
    const gate = tempDir('gate');
    const held = [
      'import os, time',
      `open(os.path.join(${JSON.stringify(gate)}, "waiting-%d" % os.getpid()), "w").close()`,
      'for _ in range(1200):',
      `    if os.path.exists(${JSON.stringify(join(gate, 'go'))}):`,
      '        break',
      '    time.sleep(0.05)',
      '',
    ].join('\n');
    writeFileSync(join(dir, 'repo', 'tests', 'conftest.py'), held);
    const input = canonicalInput('canonical', {
      fixture: dir,
      source: { kind: 'replay', path: join(dir, 'replays', 'canonical.json'), trusted: true },
    });
    const both = Promise.all([run(input), run(input)]);
    // A base run is shared only by the runs of one host store: each folder's own is under way.
    const underWay = waitFor(
      'two base test runs under way',
      async () => readdirSync(gate).filter((n) => n.startsWith('waiting-')).length >= 2,
      60_000,
    ).finally(() => writeFileSync(join(gate, 'go'), ''));
    // Both settle before the test ends, whichever fails.
    const [runs, waited] = await Promise.allSettled([both, underWay]);
    if (waited.status === 'rejected') throw waited.reason;
    if (runs.status === 'rejected') throw runs.reason;
    for (const { outcome } of runs.value) expect(outcome.record).toEqual(CANONICAL_RECORD);
  });

  it('runs the read-only steps of a run held by another host on that host: the local activity answers elsewhere', async () => {
    const taskQueue = uniqueQueue('hosts');
    const [stateA, stateB] = [tempDir('host-a'), tempDir('host-b')];
    const workflowId = `${taskQueue}-run`;
    // Host A loads the run and holds its workspace; the run waits for its first approval.
    const a = await createWorker({ connection: env.nativeConnection, taskQueue, stateDir: stateA, docker: false });
    const handle = await a.worker.runUntil(async () => {
      const h = await env.client.workflow.start('agentRun', {
        taskQueue,
        workflowId,
        args: [canonicalInput('canonical', { approver: 'interactive' })],
      });
      await pendingApproval(h);
      return h;
    });
    a.close();
    // Now host A serves only its own queue, so every workflow task goes to host B.
    const aOwn = await createWorker({ connection: env.nativeConnection, taskQueue, stateDir: stateA, docker: false, sharedQueue: false });
    const b = await createWorker({ connection: env.nativeConnection, taskQueue, stateDir: stateB, docker: false });
    try {
      const outcome = await aOwn.worker.runUntil(() =>
        b.worker.runUntil(async () => {
          await approveAll(handle);
          return (await handle.result()) as RunOutcome;
        }),
      );
      expect(outcome.record).toEqual(CANONICAL_RECORD);
      const events = (await handle.fetchHistory()).events!;
      const json = (p?: { data?: Uint8Array | null } | null) => JSON.parse(Buffer.from(p!.data!).toString('utf8'));
      const answers = events
        .filter((e) => e.markerRecordedEventAttributes?.markerName === 'core_local_activity')
        .map((e) => ({
          type: json(e.markerRecordedEventAttributes!.details!.data!.payloads![0]).activity_type as string,
          result: json(e.markerRecordedEventAttributes!.details!.result!.payloads![0]),
        }));
      const elsewhere = answers.filter((x) => x.result.kind === 'elsewhere');
      expect(new Set(elsewhere.map((x) => x.type))).toEqual(new Set(['localDecide']));
      expect(new Set(elsewhere.map((x) => x.result.host_queue))).toEqual(new Set([b.hostQueue]));
      // Each of them went on as a regular activity on host A's own queue, where the workspace is.
      const scheduled = events.filter((e) => e.activityTaskScheduledEventAttributes).map((e) => e.activityTaskScheduledEventAttributes!);
      const onA = (type: string) => scheduled.filter((x) => x.activityType!.name === type && x.taskQueue!.name === a.hostQueue).length;
      expect(onA('decide')).toBe(elsewhere.filter((x) => x.type === 'localDecide').length);
      expect(scheduled.every((x) => x.taskQueue!.name !== b.hostQueue)).toBe(true);
      // The read-only call after the approval (show_diff) ran with its decision there, on host A.
      const decided = events
        .filter((e) => e.activityTaskCompletedEventAttributes)
        .map(
          (e) =>
            json(e.activityTaskCompletedEventAttributes!.result!.payloads![0]) as {
              decisions?: { call?: { name: string }; ran?: object }[];
            },
        )
        .flatMap((r) => r.decisions ?? []);
      expect(decided.filter((d) => d.ran !== undefined).map((d) => d.call!.name)).toEqual(['show_diff']);
      // Host B held nothing of the run: no workspace, no write.
      expect(existsSync(runPaths(stateB, handle.firstExecutionRunId).root)).toBe(false);
      const ledgerB = new Ledger(join(stateB, 'ledger.sqlite'));
      expect(ledgerB.entries(handle.firstExecutionRunId)).toBe(0);
      ledgerB.close();
    } finally {
      aOwn.close();
      b.close();
    }
  });
});

describe('a run its clients query while its local activities finish', () => {
  /**
   * A Query answered while a local activity's result waits to be delivered makes the SDK's core
   * record the activity's marker in one workflow task and run the code after it in the next,
   * which a replay runs in the first (docs/decisions.md, "What a history decides"): a history
   * shows it as a local activity's marker that ends a workflow task.
   */
  const splitAfterLocal = (events: temporal.api.history.v1.IHistoryEvent[]) =>
    events.some(
      (e, i) =>
        e.markerRecordedEventAttributes?.markerName === 'core_local_activity' && events[i + 1]?.workflowTaskScheduledEventAttributes,
    );

  it('replays on both workflow bundles, also where an answered Query split a workflow task after a local activity', async () => {
    const histories: { workflowId: string; history: temporal.api.history.v1.IHistory }[] = [];
    // About every other run shows it here; twenty runs without one would be a finding of its own.
    for (let i = 0; i < 20 && !histories.some((h) => splitAfterLocal(h.history.events!)); i++) {
      const { handle, outcome } = await run(canonicalInput('canonical'), {
        drive: async (h, running) => {
          const follow = async () => {
            while (running()) await querySnapshot(h).catch(() => undefined);
          };
          await Promise.all([follow(), follow()]);
        },
      });
      expect(outcome.record.status).toBe('completed');
      histories.push({ workflowId: handle.workflowId, history: await handle.fetchHistory() });
    }
    expect(histories.some((h) => splitAfterLocal(h.history.events!))).toBe(true);
    for (const kind of ['traced', 'plain'] as const) {
      const options = { workflowBundle: await workflowBundle(kind), sinks: workerTelemetry(null).sinks };
      const errors = [];
      for await (const { workflowId, error } of Worker.runReplayHistories(options, histories))
        errors.push({ workflowId, error: error?.message ?? null });
      expect(errors).toEqual(histories.map((h) => ({ workflowId: h.workflowId, error: null })));
    }
  });
});
