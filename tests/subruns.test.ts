/**
 * Sub-runs (SPEC section 12) on a real Temporal server: an orchestrating run dispatches tasks to
 * child agentRuns by id, sends them follow-ups, stops them, merges their verified changes through
 * the write path, and takes their results back; worker processes killed in the crash windows; the
 * mis-dispatch figures in the record and the eval report; a live orchestration through both SDKs.
 */
import { createWriteStream, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { buildPlan, collectReport } from '../client/eval';
import { evalResult, queryState, runHandle, sendApproval, startEval, startRun } from '../client/run-access';
import type { RunInput, RunRecord } from '../core/contracts';
import type { RunOutcome, RunView } from '../core/run-view';
import type { TraceEvent } from '../core/trace';
import { readSettings } from '../host/settings';
import { createWorker } from '../worker';
import { addEndpoint, endpointOf, ProviderServer, reply, type Api, type ReplyCall } from './helpers/provider-server';
import { PROJECT_ROOT, tempDir, requireDockerSandbox } from './helpers/run-dir';
import { killed, runOnce, spawnWorker, startServer, traceIn, uniqueQueue, type RunOnceOptions } from './helpers/temporal';

const FIXTURE = join(PROJECT_ROOT, 'fixtures', 'py-two-modules');
const replay = (name: string) =>
  name.startsWith('subruns-') ? join(PROJECT_ROOT, 'tests', 'replays', `${name}.json`) : join(FIXTURE, 'replays', `${name}.json`);
const input = (name: string, approver = 'interactive'): RunInput => ({
  fixture: FIXTURE,
  source: { kind: 'replay', path: replay(name), trusted: true },
  backend: 'local',
  approver,
});

let env: TestWorkflowEnvironment;
beforeAll(async () => {
  env = await startServer();
});
afterAll(async () => {
  await env?.teardown();
});

const run = (i: RunInput, opts?: RunOnceOptions) => runOnce(env, i, opts);

/** Approves every pending write of the run and of its tasks (each with its own digests), until the run ends. */
async function approveTree(
  parent: WorkflowHandle,
  running: () => boolean,
  gate: (parent: RunView, task: RunView) => boolean = () => true,
): Promise<number> {
  let approved = 0;
  const done = new Set<string>();
  while (running()) {
    const view = await queryState(parent).catch(() => null);
    const handles = [parent, ...(view?.subruns?.tasks ?? []).map((t) => parent.client.getHandle(t.task_id))];
    for (const h of handles) {
      const v = h === parent ? view : await queryState(h).catch(() => null);
      const p = v?.status === 'awaiting_approval' ? v.pending_approval : null;
      if (!p || done.has(p.action_id) || (h !== parent && view && !gate(view, v!))) continue;
      await sendApproval(h, {
        action_id: p.action_id,
        decision: 'approve',
        args_digest: p.args_digest,
        workspace_digest: p.workspace_digest,
        principal: 'user:test',
      });
      done.add(p.action_id);
      approved++;
    }
    await new Promise((r) => setTimeout(r, 150));
  }
  return approved;
}

const observed = (trace: TraceEvent[], callId: string) =>
  trace.find((e) => e.type === 'tool_observed' && e.call_id === callId)?.data as
    { ok: boolean; error: string | null; data: any } | undefined;
const taskOf = (outcome: RunOutcome, title: string) => outcome.state.subruns!.tasks.find((t) => t.title === title)!;
/** Every proposed call got exactly one result. */
function everyCallAnsweredOnce(trace: TraceEvent[]): void {
  const proposedIds = trace.filter((e) => e.type === 'tool_proposed').map((e) => e.call_id);
  const answered = trace.filter((e) => e.type === 'tool_observed').map((e) => e.call_id);
  expect(answered.sort()).toEqual(proposedIds.sort());
}

describe('an orchestrating run', () => {
  it('dispatches two tasks in parallel, each fixes one module and completes, and merges both with two approvals', async () => {
    let approvals = 0;
    const { outcome, trace, stateDir, handle, receipts } = await run(input('canonical'), {
      drive: async (h, running) => (approvals = await approveTree(h, running)),
    });
    expect(outcome.record).toMatchObject({
      status: 'completed',
      writes: 2,
      receipts: 2,
      diff_paths: ['src/mathx.py', 'src/strx.py', 'tests/test_agent_clamp.py', 'tests/test_agent_title.py'],
      acceptance: { total: 6, passed: 6, failed: [] },
      subruns: { dispatched: 2, messages: 0, stops: 0, merges: 2, unknown_task: 0, messages_to_ended: 0 },
      tasks: [
        { title: 'clamp', status: 'completed', reason: null },
        { title: 'title case', status: 'completed', reason: null },
      ],
    });
    // Two approvals are the parent's (its two merges); the tasks' own writes were approved in their runs.
    expect(trace.filter((e) => e.type === 'approval_recorded').map((e) => (e.data as { principal: string }).principal)).toEqual([
      'user:test',
      'user:test',
    ]);
    expect(approvals).toBe(2 + 4);
    expect(receipts).toHaveLength(2);
    everyCallAnsweredOnce(trace);
    // The tasks ran at the same time, as child workflows of the run (the Web UI shows them under it: tests/cli.test.ts).
    const children = await Promise.all(
      outcome.state.subruns!.tasks.map(async (t) => (await runHandle(env.client, t.task_id).describe()).raw.workflowExecutionInfo!),
    );
    for (const c of children) expect(c.parentExecution?.workflowId).toBe(handle.workflowId);
    const [a, b] = await Promise.all(outcome.state.subruns!.tasks.map((t) => runHandle(env.client, t.task_id).describe()));
    expect(a.startTime.getTime()).toBeLessThan(b.closeTime!.getTime());
    expect(b.startTime.getTime()).toBeLessThan(a.closeTime!.getTime());
    // Each task id derives from the parent's id and its dispatch's action id.
    for (const t of outcome.state.subruns!.tasks) expect(t.task_id).toBe(`${handle.workflowId}/task-${t.action_id.slice(0, 16)}`);
    // A task's run verified its own change (tests, protected paths), without the hidden cases.
    const clamp = taskOf(outcome, 'clamp');
    const clampRun = (await runHandle(env.client, clamp.task_id).result()) as RunOutcome;
    expect(clampRun.record).toMatchObject({
      status: 'completed',
      writes: 2,
      acceptance: { total: 0 },
      diff_paths: ['src/mathx.py', 'tests/test_agent_clamp.py'],
    });
    expect(clampRun.state.parent).toEqual({ workflow_id: handle.workflowId, task_id: clamp.task_id, title: 'clamp' });
    expect(traceIn(stateDir, clampRun.state.run_id).map((e) => e.type)).toContain('run_finished');
  });

  it('takes a follow-up to a running task at its next step, reopens an ended task with its context, and answers an invented id with unknown_task', async () => {
    // The tasks' writes are approved only once the parent waits again, so each message meets the task where the replay expects it.
    const gate = (parent: RunView, task: RunView) => {
      const writes = task.counters.writes;
      return parent.counters.tool_calls >= (writes === 0 ? 4 : 5);
    };
    const { outcome, trace, stateDir } = await run(input('subruns-follow-up'), { drive: (h, running) => approveTree(h, running, gate) });
    expect(outcome.record).toMatchObject({
      status: 'failed',
      reason: 'verification_failed',
      writes: 1,
      subruns: { dispatched: 1, messages: 2, stops: 0, merges: 1, unknown_task: 1, messages_to_ended: 1 },
      tasks: [{ title: 'clamp', status: 'completed', reason: null }],
      tool_errors: { unknown_task: 1 },
    });
    expect(observed(trace, 'msg-running')).toMatchObject({ ok: true, data: { delivered: 'to the running task, at its next step' } });
    expect(observed(trace, 'msg-ended')).toMatchObject({
      ok: true,
      data: { delivered: 'reopened the task with its context', execution: 2 },
    });
    expect(observed(trace, 'bad-id')).toMatchObject({
      ok: false,
      error: 'unknown_task',
      data: { known: [taskOf(outcome, 'clamp').task_id] },
    });
    const clamp = taskOf(outcome, 'clamp');
    expect(clamp.executions).toBe(2);
    // One task, two executions of its child workflow, one workspace and one trace numbering.
    const taskTrace = traceIn(stateDir, clamp.run_id!);
    const requests = taskTrace.filter((e) => e.type === 'model_requested').map((e) => (e.data as { messages: string[] }).messages);
    expect(requests.flat()).toEqual([
      'Keep the behaviour for values inside the range exactly as it is.',
      'Check that the docstring still says what clamp does.',
    ]);
    expect(taskTrace.filter((e) => e.type === 'run_started').map((e) => (e.data as { reopened: boolean }).reopened)).toEqual([false, true]);
    expect(taskTrace.filter((e) => e.type === 'run_finished').map((e) => (e.data as { status: string }).status)).toEqual([
      'completed',
      'completed',
    ]);
    expect(taskTrace.map((e) => e.seq)).toEqual(Array.from({ length: taskTrace.length }, (_, i) => i + 1));
    everyCallAnsweredOnce(trace);
  });

  it('stops a task that waits for an approval: it ends interrupted, its pending call gets its result, and the next decision sees it', async () => {
    const { outcome, trace, stateDir } = await run(input('subruns-stop'));
    const clamp = taskOf(outcome, 'clamp');
    expect(outcome.record).toMatchObject({
      subruns: { dispatched: 1, stops: 1, merges: 0 },
      tasks: [{ title: 'clamp', status: 'cancelled', reason: 'interrupted' }],
    });
    expect(observed(trace, 'stop-clamp')).toMatchObject({ ok: true, data: { status: 'cancelled', reason: 'interrupted' } });
    const taskTrace = traceIn(stateDir, clamp.run_id!);
    expect(observed(taskTrace, 'add-clamp-test')).toMatchObject({ ok: false, error: 'interrupted' });
    expect(taskTrace.find((e) => e.type === 'stop_received')?.data).toEqual({ reason: 'the user wants to fix clamp by hand' });
    // The parent's next decision carries the task's end.
    const stopSeq = trace.find((e) => e.type === 'tool_observed' && e.call_id === 'stop-clamp')!.seq;
    const next = trace.find((e) => e.type === 'model_requested' && e.seq > stopSeq)!;
    expect((next.data as { messages: string[] }).messages.join('\n')).toMatch(/ended cancelled \(interrupted\)/);
    everyCallAnsweredOnce(trace);
  });

  it('reports a task that fails its verification back to the parent, which lists it in its record', async () => {
    const { outcome, trace } = await run(input('wrong-child', 'policy:approve-writable'));
    expect(outcome.record).toMatchObject({
      status: 'failed',
      reason: 'verification_failed',
      writes: 1,
      subruns: { dispatched: 2, merges: 1, unknown_task: 1 },
      tasks: [
        { title: 'clamp', status: 'completed', reason: null },
        { title: 'title case', status: 'failed', reason: 'verification_failed' },
      ],
      tool_errors: { task_not_accepting: 1, unknown_task: 1 },
    });
    expect(observed(trace, 'merge-title')).toMatchObject({ ok: false, error: 'task_not_accepting', data: { status: 'failed' } });
    const messages = trace.filter((e) => e.type === 'model_requested').flatMap((e) => (e.data as { messages: string[] }).messages);
    expect(messages.some((m) => /"title case" ended failed \(verification_failed\)/.test(m))).toBe(true);
  });
});

describe('crash windows', () => {
  it.each(['child_started', 'child_finishing'] as const)(
    'a worker killed at %s: one child per dispatch, one merge per merge action, every call answered once',
    async (point) => {
      const stateDir = tempDir(`subruns-${point}`);
      const taskQueue = uniqueQueue(`subruns-${point}`);
      const log = createWriteStream(join(stateDir, 'worker.log'));
      const first = spawnWorker(env, taskQueue, stateDir, { AGENT_FAULT: point });
      first.stderr!.pipe(log, { end: false });
      const handle = await startRun(env.client, input('canonical', 'policy:approve-writable'), {
        taskQueue,
        workflowId: `${taskQueue}-run`,
      });
      await killed(first);
      expect(first.signalCode).toBe('SIGKILL');
      const second = spawnWorker(env, taskQueue, stateDir);
      second.stderr!.pipe(log, { end: false });
      try {
        const outcome = (await handle.result()) as RunOutcome;
        expect(outcome.record).toMatchObject({ status: 'completed', writes: 2, receipts: 2, subruns: { dispatched: 2, merges: 2 } });
        for (const t of outcome.state.subruns!.tasks) {
          const executions = [];
          for await (const w of env.client.workflow.list({ query: `WorkflowId = '${t.task_id}'` })) executions.push(w.runId);
          expect(executions).toHaveLength(1);
        }
        const trace = traceIn(stateDir, handle.firstExecutionRunId);
        everyCallAnsweredOnce(trace);
        expect(trace.filter((e) => e.type === 'action_written').map((e) => e.action_id)).toHaveLength(2);
        expect(new Set(trace.filter((e) => e.type === 'action_written').map((e) => e.action_id)).size).toBe(2);
      } finally {
        second.kill('SIGTERM');
        await killed(second);
        log.end();
      }
    },
    300_000,
  );
});

describe('mis-dispatch in the eval report', () => {
  it('sums the sub-run figures of every run, unknown ids among them', async () => {
    const taskQueue = uniqueQueue('subruns-eval');
    const stateDir = tempDir('subruns-eval-state');
    const settings = { ...readSettings(), stateDir };
    const plan = await buildPlan(settings, [FIXTURE], {
      epochs: 1,
      backend: 'local',
      approver: 'policy:approve-writable',
      trustReplay: true,
    });
    const { worker, close } = await createWorker({ connection: env.nativeConnection, taskQueue, stateDir, docker: false });
    const batch = `subruns-batch-${process.pid}`;
    try {
      await worker.runUntil(async () =>
        evalResult(await startEval(env.client, { plan, concurrency: 2 }, { taskQueue, workflowId: batch })),
      );
      const { report } = await collectReport(env.client, settings, batch, plan, null);
      expect(report.runs.map((r) => [r.replay, r.status, r.subruns])).toEqual([
        ['canonical', 'completed', { dispatched: 2, messages: 0, stops: 0, merges: 2, unknown_task: 0, messages_to_ended: 0 }],
        ['wrong-child', 'failed', { dispatched: 2, messages: 0, stops: 0, merges: 1, unknown_task: 1, messages_to_ended: 0 }],
      ]);
      expect(report.summary.subruns).toEqual({ dispatched: 4, messages: 0, stops: 0, merges: 3, unknown_task: 1, messages_to_ended: 0 });
    } finally {
      close();
    }
  });
});

describe('a live orchestration', () => {
  const KEY_ENV = 'AGENT_TEST_SUBRUNS_KEY';
  process.env[KEY_ENV] = 'sk-test-subruns';
  const CHILD_STEPS = (clamp: boolean): { text?: string; calls?: ReplyCall[] }[] => {
    const r = JSON.parse(readFileSync(replay('canonical'), 'utf8')).children[clamp ? 'clamp' : 'title case'].decisions as {
      kind: string;
      text?: string;
      call?: ReplyCall & { call_id: string; arguments: unknown };
    }[];
    return r.map((d) =>
      d.kind === 'tool' ? { calls: [{ id: d.call!.call_id, name: d.call!.name, arguments: d.call!.arguments }] } : { text: d.text },
    );
  };

  it.each(['openai', 'anthropic'] as const)(
    'through the %s SDK: the orchestration tools declared, two dispatches and two merges each answered together',
    async (api: Api) => {
      await requireDockerSandbox();
      const canonical = JSON.parse(readFileSync(replay('canonical'), 'utf8')).decisions as {
        kind: string;
        call?: { call_id: string; name: string; arguments: unknown };
      }[];
      const dispatches = canonical
        .filter((d) => d.call?.name === 'dispatch_task')
        .map((d) => ({ id: d.call!.call_id, name: 'dispatch_task', arguments: d.call!.arguments }));
      const firstUser = (body: any): string => {
        const m = body.messages.find((x: { role: string }) => x.role === 'user');
        return typeof m.content === 'string' ? m.content : m.content.map((b: { text?: string }) => b.text ?? '').join('');
      };
      const steps = (body: any) => body.messages.filter((x: { role: string }) => x.role === 'assistant').length;
      /** The task ids the parent saw in its dispatch results, in order. */
      const taskIds = (body: any): string[] =>
        JSON.stringify(body)
          .match(/[A-Za-z0-9_.:-]+\/task-[0-9a-f]{16}/g)
          ?.filter((v, i, a) => a.indexOf(v) === i) ?? [];
      const server = await new ProviderServer((req) => {
        const who = firstUser(req.body);
        const step = steps(req.body);
        if (who.includes('one task of a larger run: clamp')) return { body: reply(api, CHILD_STEPS(true)[step] ?? { text: 'done' }) };
        if (who.includes('one task of a larger run: title case')) return { body: reply(api, CHILD_STEPS(false)[step] ?? { text: 'done' }) };
        if (step === 0) return { body: reply(api, { text: 'One task per module.', calls: dispatches }) };
        if (step === 1)
          return {
            body: reply(api, {
              calls: taskIds(req.body).map((id, i) => ({ id: `merge-${i}`, name: 'merge_task', arguments: { task_id: id } })),
            }),
          };
        return { body: reply(api, { text: 'Both merged.' }) };
      }).start();
      const providersFile = join(tempDir('providers'), 'providers.json');
      try {
        const endpoint = addEndpoint(providersFile, endpointOf(api, server, KEY_ENV));
        const { outcome } = await run(
          {
            fixture: FIXTURE,
            source: { kind: 'provider', endpoint, model: 'test-model' },
            backend: 'docker',
            approver: 'policy:approve-writable',
          },
          { providersFile },
        );
        expect(outcome.record).toMatchObject({
          status: 'completed',
          writes: 2,
          subruns: { dispatched: 2, merges: 2 },
          tasks: [{ status: 'completed' }, { status: 'completed' }],
        });
        const parentRequests = server.requests.filter((r) => !firstUser(r.body).includes('one task of a larger run'));
        const childRequests = server.requests.filter((r) => firstUser(r.body).includes('one task of a larger run'));
        const toolNames = (r: { body: any }) => r.body.tools.map((t: any) => t.name ?? t.function?.name).sort();
        expect(toolNames(parentRequests[0])).toEqual([
          'apply_patch',
          'dispatch_task',
          'merge_task',
          'message_task',
          'read_file',
          'run_tests',
          'search',
          'show_diff',
          'stop_task',
          'task_status',
        ]);
        expect(toolNames(childRequests[0])).toEqual(['apply_patch', 'read_file', 'run_tests', 'search', 'show_diff']);
        expect(parentRequests).toHaveLength(3);
        expect(childRequests).toHaveLength(12);
        // The server refuses a conversation with an unanswered call: both calls of each reply came back together.
        const results = (body: any) =>
          api === 'openai'
            ? body.messages.filter((m: { role: string }) => m.role === 'tool').map((m: { tool_call_id: string }) => m.tool_call_id)
            : body.messages
                .flatMap((m: { content: unknown }) => (Array.isArray(m.content) ? m.content : []))
                .filter((b: { type: string }) => b.type === 'tool_result')
                .map((b: { tool_use_id: string }) => b.tool_use_id);
        expect(results(parentRequests[1].body)).toEqual(['dispatch-clamp', 'dispatch-title']);
        expect(results(parentRequests[2].body)).toEqual(['dispatch-clamp', 'dispatch-title', 'merge-0', 'merge-1']);
      } finally {
        await server.close();
      }
    },
  );
});

export type { RunRecord };
