/**
 * Messages at any moment of a run's life (docs/how-a-run-goes.md, "Messages at any moment"), on a
 * real Temporal server, a real worker and real test processes: a cancel request, an interrupt and
 * a steer sent to a run, and a stop sent to a task (by its parent's `stop_task` and by the `stop`
 * Signal), before the first decision, during a write's approval wait, during a long test run,
 * during verification and between two segments of continue-as-new. Each moment is made to last by
 * the test's own hold: an activity held back by a wrapper, or a test that waits while a flag file
 * exists, so the message arrives exactly there. The server suggests continue-as-new from 250
 * events, which only the runs that pile up ignored approvals reach.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { describeEvent } from '../client/describe';
import { queryState, runHandle, sendApproval, sendInterrupt, sendSteer, sendStop, type RunHandle } from '../client/run-access';
import type { Activities } from '../core/activities';
import type { RunInput } from '../core/contracts';
import type { RunOutcome } from '../core/run-view';
import type { TraceEvent } from '../core/trace';
import { tempDir, writeFiles } from './helpers/run-dir';
import { pendingApproval, runOnce, startServer, traceIn, traceOf, waitFor, type RunOnceOptions } from './helpers/temporal';

let env: TestWorkflowEnvironment;
beforeAll(async () => {
  env = await startServer(['--dynamic-config-value', 'limit.historyCount.suggestContinueAsNew=250']);
});
afterAll(async () => {
  await env?.teardown();
});

// ---- the held test: a test run that lasts while a flag file exists ----

const MARKER = `agent-held-test-${process.pid}`;
const FLAG = join(tempDir('held'), 'hold');
const holdTests = (on: boolean) => (on ? writeFileSync(FLAG, '') : rmSync(FLAG, { force: true }));

/** A fixture whose one test, while the flag file exists, starts a child process and waits. */
function heldFixture(): string {
  const dir = tempDir('held-fixture');
  writeFiles(dir, {
    'fixture.json': JSON.stringify({
      schema_version: 1,
      id: 'held',
      task: 'value() must stay 1.',
      writable: ['src/app.py'],
      new_files: ['tests/test_agent_*.py'],
      tests: { command: ['python3', '-m', 'pytest', '-q', '-p', 'no:cacheprovider', 'tests'], format: 'pytest', timeout_s: 300 },
      acceptance: { command: ['python3', '{acceptance}/check.py'], timeout_s: 60 },
      budgets: { max_turns: 10, max_tool_calls: 10, deadline_s: 600, call_timeout_s: 300 },
    }),
    'repo/src/app.py': 'def value():\n    return 1\n',
    'repo/tests/test_app.py': [
      'import os, subprocess, sys, time',
      'from pathlib import Path',
      '',
      'sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))',
      '',
      'from app import value  # noqa: E402',
      '',
      '',
      'def test_value():',
      `    if os.path.exists(${JSON.stringify(FLAG)}):`,
      `        subprocess.Popen(["bash", "-c", "exec -a ${MARKER} sleep 300"])`,
      `        while os.path.exists(${JSON.stringify(FLAG)}):`,
      '            time.sleep(0.1)',
      '    assert value() == 1',
      '',
    ].join('\n'),
    'acceptance/check.py':
      'import json, os, sys\nsys.path.insert(0, os.path.join(os.getcwd(), "src"))\nfrom app import value\n' +
      'print(json.dumps({"schema_version": 1, "cases": [{"id": "value", "actual": value(), "error": None}]}))\n',
    'acceptance/expected.json': JSON.stringify({ schema_version: 1, cases: { value: 1 } }),
  });
  mkdirSync(join(dir, 'replays'));
  return dir;
}
const FIXTURE = heldFixture();

interface Proc {
  pid: number;
  pgid: number;
  stat: string;
  args: string;
}
function processes(): Proc[] {
  return execFileSync('ps', ['-eo', 'pid=,pgid=,stat=,args='], { encoding: 'utf8' })
    .split('\n')
    .map((line) => /^\s*(\d+)\s+(\d+)\s+(\S+)\s+(.*)$/.exec(line))
    .filter((m) => m !== null)
    .map((m) => ({ pid: Number(m[1]), pgid: Number(m[2]), stat: m[3], args: m[4] }));
}

/** The pids of the held test's process group (pytest and the child it started), once it runs. */
async function heldTree(): Promise<number[]> {
  return waitFor('the held test to run', async () => {
    const all = processes();
    const marker = all.find((p) => p.args.startsWith(MARKER));
    return marker ? all.filter((p) => p.pgid === marker.pgid).map((p) => p.pid) : null;
  });
}

/** Every process of `pids` is gone (reaped, not a zombie), within seconds of the message that stopped them. */
async function gone(pids: number[]): Promise<void> {
  await waitFor(
    `processes ${pids.join(', ')} to be gone`,
    async () => !processes().some((p) => pids.includes(p.pid) && !p.stat.startsWith('Z')),
    20_000,
  );
}

/** Steers and interrupts `target` while the held test runs, then waits for that test's tree (`pids`) to be gone. */
async function steerAndCut(target: RunHandle, pids: number[], steer: string, reason: string): Promise<void> {
  await sendSteer(target, steer, 'test:steer');
  await sendInterrupt(target, reason, 'test:interrupt');
  await gone(pids);
  holdTests(false);
}

// ---- holding an activity back ----

/** One activity call held back: `reached` once the run gets there; it goes on at `release()`. */
class Hold {
  isReached = false;
  private reach!: () => void;
  readonly reached = new Promise<void>((r) => (this.reach = r));
  private open!: () => void;
  private readonly opened = new Promise<void>((r) => (this.open = r));
  private taken = false;

  release(): void {
    this.open();
  }

  /** Wraps the worker's `name` so that its first call `picks` waits for `release()`. */
  on<K extends keyof Activities>(name: K, picks: (...args: Parameters<Activities[K]>) => boolean = () => true) {
    return (acts: Activities): Activities => {
      const real = acts[name] as (...args: unknown[]) => Promise<unknown>;
      const held = async (...args: unknown[]) => {
        if (!this.taken && picks(...(args as Parameters<Activities[K]>))) {
          this.taken = true;
          this.isReached = true;
          this.reach();
          await this.opened;
        }
        return real(...args);
      };
      return { ...acts, [name]: held };
    };
  }
}

const wrapAll =
  (...wraps: ((a: Activities) => Activities)[]) =>
  (acts: Activities) =>
    wraps.reduce((a, w) => w(a), acts);

/** The persist of a segment that continues as new (its trace has the boundary). */
const continuing = (input: Parameters<Activities['persist']>[0]) => input.trace.some((e) => e.type === 'continued_as_new');

// ---- replays ----

const tool = (callId: string, name: string, args: object) => ({ kind: 'tool', call: { call_id: callId, name, arguments: args } });
const runTests = (id: string) => tool(id, 'run_tests', { preset: 'candidate_tests' });
const read = (id: string) => tool(id, 'read_file', { path: 'src/app.py' });
const newTest = (id: string) =>
  tool(id, 'apply_patch', { path: 'tests/test_agent_more.py', version: 'absent', old: '', new: 'def test_more():\n    assert True\n' });
const final = (text: string) => ({ kind: 'final', text });
const dispatch = tool('dispatch', 'dispatch_task', {
  title: 'task',
  requirements: 'value() must stay 1.',
  known_facts: ['src/app.py returns 1'],
  suggestions: [],
});
const stopTask = tool('stop-task', 'stop_task', { task_id: '$task:task', reason: 'the user changed the plan' });
const waitTask = (id: string) => tool(id, 'task_status', { task_id: '$task:task', wait: true });

function input(decisions: unknown[], child?: unknown[]): RunInput {
  const file = join(tempDir('replay'), 'scripted.json');
  const children = child ? { children: { task: { schema_version: 1, decisions: child } } } : {};
  writeFileSync(file, JSON.stringify({ schema_version: 1, decisions, ...children }));
  return {
    fixture: FIXTURE,
    source: { kind: 'replay', path: file, trusted: true },
    backend: 'local',
    approver: 'interactive',
    ...(child ? { subruns: { max_children: 2, max_active: 1, max_depth: 1 } } : {}),
  };
}

const run = (i: RunInput, drive: RunOnceOptions['drive'], wrapActivities?: RunOnceOptions['wrapActivities']) =>
  runOnce(env, i, { drive, wrapActivities });

// ---- reading the outcome ----

const types = (trace: TraceEvent[]) => trace.map((e) => e.type);
const observed = (trace: TraceEvent[], callId: string) =>
  trace
    .filter((e) => e.type === 'tool_observed' && e.call_id === callId)
    .map((e) => e.data as { ok: boolean; error: string | null; data: any });
/** The messages of the request of `turn` (the first one of that turn). */
const requestOf = (trace: TraceEvent[], turn: number) =>
  (trace.find((e) => e.type === 'model_requested' && (e.data as { turn: number }).turn === turn)?.data as { messages: string[] })?.messages;
const after = (trace: TraceEvent[], a: (e: TraceEvent) => boolean, b: (e: TraceEvent) => boolean) =>
  trace.findIndex(a) >= 0 && trace.findIndex(a) < trace.findIndex(b);
const isType = (type: string, callId?: string) => (e: TraceEvent) => e.type === type && (callId === undefined || e.call_id === callId);

/** The task of an orchestrating run (its id once dispatched). */
async function taskHandle(parent: RunHandle): Promise<RunHandle> {
  const id = await waitFor('the task to be dispatched', async () => (await queryState(parent)).subruns?.tasks[0]?.task_id);
  return runHandle(env.client, id);
}
const taskOf = (outcome: RunOutcome) => outcome.state.subruns!.tasks[0];
async function taskRun(outcome: RunOutcome): Promise<RunOutcome> {
  return (await runHandle(env.client, taskOf(outcome).task_id).result()) as RunOutcome;
}
const untilEnded = (parent: RunHandle) =>
  waitFor('the task to end', async () => {
    const t = (await queryState(parent)).subruns?.tasks[0];
    return t && !['starting', 'running', 'awaiting_approval', 'verifying'].includes(t.status);
  });

/** Piles up ignored approvals (wrong digests) on a waiting write until the hold is reached: the history passes the suggestion and the wait continues as new. */
async function growUntil(h: RunHandle, hold: Hold): Promise<void> {
  const p = await pendingApproval(h);
  const ignored = {
    action_id: p.action_id,
    decision: 'approve' as const,
    args_digest: '0'.repeat(64),
    workspace_digest: p.workspace_digest,
  };
  while (!hold.isReached) {
    for (let i = 0; i < 25 && !hold.isReached; i++) await sendApproval(h, ignored);
    // A pause after each batch gives the run a quiet moment to reach the boundary: on a loaded
    // machine an unbroken flood kept it from getting there until the server's limit of signals.
    await Promise.race([hold.reached, new Promise((r) => setTimeout(r, 500))]);
  }
}

afterEach(() => holdTests(false));

describe('a run', () => {
  it('cancelled while it loads ends cancelled with its record and trace, before any workspace', async () => {
    const load = new Hold();
    const { outcome, trace, stateDir } = await run(
      input([read('read'), final('done')]),
      async (h, running) => {
        await load.reached;
        await h.cancel();
        await waitFor('the run to end', async () => !running());
        load.release();
      },
      load.on('loadRun'),
    );
    expect(outcome.record).toMatchObject({ status: 'cancelled', reason: 'cancelled', turns: 0, tool_calls: 0 });
    expect(types(trace)).toEqual(['run_started', 'run_finished']);
    expect(existsSync(join(stateDir, 'runs', outcome.state.run_id, 'workspace'))).toBe(false);
  });

  it('takes an interrupt, a steer, a stop and an approval sent while its workspace is prepared: the first request reads the steer and the interrupt, its reply runs', async () => {
    const prepare = new Hold();
    const { outcome, trace, transcript } = await run(
      input([read('read'), final('done')]),
      async (h) => {
        await prepare.reached;
        await sendSteer(h, 'keep value() as it is', 'test:steer');
        await sendInterrupt(h, 'wait for me', 'test:interrupt');
        await sendStop(h, 'stop everything', 'test:stop');
        await sendApproval(h, {
          action_id: 'a'.repeat(64),
          decision: 'approve',
          args_digest: 'b'.repeat(64),
          workspace_digest: 'c'.repeat(64),
        });
        await waitFor('the messages to be taken', async () => (await traceOf(h)).some((e) => e.type === 'approval_ignored'));
        prepare.release();
      },
      prepare.on('prepareWorkspace'),
    );
    expect(outcome.record).toMatchObject({ status: 'completed', tool_calls: 1, tool_errors: {} });
    expect(types(trace).slice(0, 6)).toEqual([
      'run_started',
      'steer_received',
      'interrupt_received',
      'stop_ignored',
      'approval_ignored',
      'model_requested',
    ]);
    expect(trace[4].data).toEqual({ reason: 'no approval is pending' });
    expect(requestOf(trace, 1)).toEqual(['keep value() as it is', 'interrupt: wait for me']);
    expect(observed(trace, 'read')).toMatchObject([{ ok: true }]);
    // What the model saw: the two messages, then its call and its result.
    expect(transcript.slice(0, 2)).toEqual([{ message: 'keep value() as it is' }, { message: 'interrupt: wait for me' }]);
    expect(outcome.state.unread).toBeNull();
  });

  it('cancelled while a write waits for approval ends cancelled, the waiting call answered', async () => {
    const { outcome, trace, ledgerEntries } = await run(input([newTest('more'), final('done')]), async (h) => {
      await pendingApproval(h);
      await h.cancel();
    });
    expect(outcome.record).toMatchObject({ status: 'cancelled', reason: 'cancelled', writes: 0 });
    expect(observed(trace, 'more')).toMatchObject([{ ok: false, error: 'interrupted', data: { run_end: 'cancelled' } }]);
    expect(ledgerEntries).toBe(0);
  });

  it('interrupted during a long test run cuts the test off at once, its process tree gone; the next request reads the steer', async () => {
    holdTests(true);
    const { outcome, trace, transcript } = await run(input([runTests('tests'), read('after'), final('done')]), async (h) => {
      const pids = await heldTree();
      await steerAndCut(h, pids, 'the tests take too long; read the source instead', 'too slow');
    });
    expect(outcome.record).toMatchObject({ status: 'completed', tool_calls: 2, tool_errors: { interrupted: 1 } });
    expect(observed(trace, 'tests')).toMatchObject([{ ok: false, error: 'interrupted', data: { reason: 'cut off: too slow' } }]);
    expect(after(trace, isType('interrupt_received'), isType('tool_observed', 'tests'))).toBe(true);
    expect(requestOf(trace, 2)).toEqual(['the tests take too long; read the source instead']);
    expect(observed(trace, 'after')).toMatchObject([{ ok: true }]);
    const cut = transcript.findIndex((e) => 'decision' in e && (e.result as { call_id?: string } | undefined)?.call_id === 'tests');
    expect(transcript[cut]).toMatchObject({ result: { error: 'interrupted', data: { reason: 'cut off: too slow' } } });
    expect(transcript[cut + 1]).toEqual({ message: 'the tests take too long; read the source instead' });
  });

  it('cancelled during a long test run ends cancelled, the test process tree gone', async () => {
    holdTests(true);
    const { outcome, trace } = await run(input([runTests('tests'), final('done')]), async (h) => {
      const pids = await heldTree();
      await h.cancel();
      await gone(pids);
    });
    expect(outcome.record).toMatchObject({ status: 'cancelled', reason: 'cancelled' });
    expect(observed(trace, 'tests')).toMatchObject([{ ok: false, error: 'interrupted', data: { run_end: 'cancelled' } }]);
  });

  it('interrupted during verification cuts it off, its tests gone, and goes on: the next request says the final answer was not verified', async () => {
    holdTests(true);
    const { outcome, trace } = await run(input([final('first'), final('second')]), async (h) => {
      const pids = await heldTree();
      expect((await queryState(h)).status).toBe('verifying');
      await steerAndCut(h, pids, 'also look at the tests', 'not yet');
    });
    expect(outcome.record).toMatchObject({ status: 'completed', turns: 2, candidate_tests: { discovered: 1, passed: 1 } });
    expect(outcome.state.final_summary).toBe('second');
    expect(trace.find((e) => e.type === 'final_interrupted')?.data).toEqual({ reason: 'not yet', during: 'verification' });
    expect(types(trace).filter((t) => t.startsWith('verification_'))).toEqual([
      'verification_started',
      'verification_started',
      'verification_passed',
    ]);
    expect(requestOf(trace, 2)).toEqual(['also look at the tests', 'interrupt: not yet (your final answer was not verified)']);
  });

  it('steered during verification ends as the verifier says, the message kept as unread with its end', async () => {
    holdTests(true);
    const { outcome, trace } = await run(input([final('done')]), async (h) => {
      await heldTree();
      await sendSteer(h, 'one more thing', 'test:steer');
      await waitFor('the steer to be taken', async () => (await traceOf(h)).some((e) => e.type === 'steer_received'));
      holdTests(false);
    });
    expect(outcome.record).toMatchObject({ status: 'completed' });
    expect(outcome.state.unread).toEqual({ messages: ['one more thing'], interrupt: null });
    expect(trace.at(-1)).toMatchObject({
      type: 'run_finished',
      data: { status: 'completed', unread: { messages: ['one more thing'], interrupt: null } },
    });
  });

  it("cancelled during verification ends cancelled, the verifier's tests gone", async () => {
    holdTests(true);
    const { outcome, trace } = await run(input([final('done')]), async (h) => {
      const pids = await heldTree();
      await h.cancel();
      await gone(pids);
    });
    expect(outcome.record).toMatchObject({ status: 'cancelled', reason: 'cancelled' });
    expect(outcome.state.verification).toBeNull();
    expect(types(trace).slice(-2)).toEqual(['verification_started', 'run_finished']);
  });

  it('interrupted and steered between two segments of continue-as-new: the next segment answers the carried write interrupted, its next request reads the steer', async () => {
    const boundary = new Hold();
    const { outcome, trace } = await run(
      input([newTest('more'), read('after'), final('done')]),
      async (h) => {
        await growUntil(h, boundary);
        await sendSteer(h, 'no new test file', 'test:steer');
        await sendInterrupt(h, 'skip that write', 'test:interrupt');
        boundary.release();
      },
      boundary.on('persist', continuing),
    );
    expect(outcome.record).toMatchObject({ status: 'completed', writes: 0, tool_errors: { interrupted: 1 } });
    expect(outcome.state.segment).toBe(2);
    expect(after(trace, isType('continued_as_new'), isType('interrupt_received'))).toBe(true);
    expect(observed(trace, 'more')).toMatchObject([{ ok: false, error: 'interrupted', data: { reason: 'not executed: skip that write' } }]);
    expect(requestOf(trace, 2)).toEqual(['no new test file']);
  });

  it('cancelled between two segments of continue-as-new ends cancelled in the first segment, the waiting call answered', async () => {
    const boundary = new Hold();
    const { outcome, trace } = await run(
      input([newTest('more'), final('done')]),
      async (h, running) => {
        await growUntil(h, boundary);
        await h.cancel();
        await waitFor('the run to end', async () => !running());
        boundary.release();
      },
      boundary.on('persist', continuing),
    );
    expect(outcome.record).toMatchObject({ status: 'cancelled', reason: 'cancelled', writes: 0 });
    expect(outcome.state.segment).toBe(1);
    expect(observed(trace, 'more')).toMatchObject([{ ok: false, error: 'interrupted', data: { run_end: 'cancelled' } }]);
    expect(after(trace, isType('continued_as_new'), isType('run_finished'))).toBe(true);
  });
});

describe('a task', () => {
  it('stopped by stop_task right after its dispatch, while it loads, ends cancelled / interrupted at once and is reported so', async () => {
    const childLoad = new Hold();
    const parentTurn = new Hold();
    const { outcome, trace, stateDir } = await run(
      input([dispatch, stopTask, final('stopped it')], [runTests('tests'), final('done')]),
      async (h) => {
        await childLoad.reached;
        parentTurn.release();
        await untilEnded(h);
        childLoad.release();
      },
      wrapAll(
        childLoad.on('loadRun', (i) => i.child !== undefined),
        parentTurn.on('localDecide', (_q, i) => i.orchestrating === true && i.turn === 2),
      ),
    );
    expect(outcome.record).toMatchObject({
      status: 'completed',
      subruns: { dispatched: 1, stops: 1 },
      tasks: [{ title: 'task', status: 'cancelled', reason: 'interrupted' }],
    });
    const task = taskOf(outcome);
    expect(observed(trace, 'stop-task')).toMatchObject([
      { ok: true, data: { task_id: task.task_id, status: 'cancelled', reason: 'interrupted' } },
    ]);
    expect(requestOf(trace, 3)!.join('\n')).toMatch(/ended cancelled \(interrupted\)/);
    const child = await taskRun(outcome);
    expect(child.record).toMatchObject({ status: 'cancelled', reason: 'interrupted', turns: 0, tool_calls: 0 });
    expect(types(traceIn(stateDir, child.state.run_id))).toEqual(['run_started', 'stop_received', 'run_finished']);
    // The trace as `trace` and `follow` print it names each orchestration result for what it is.
    const lines = trace.map(describeEvent);
    expect(lines.filter((l) => l.includes('undefined'))).toEqual([]);
    expect(lines.find((l) => l.includes('[stop-task] ok'))).toMatch(
      /\[stop-task\] ok task \S+\/task-[0-9a-f]{16}: cancelled \(interrupted\)$/,
    );
    expect(lines.find((l) => l.includes('[dispatch] ok'))).toMatch(/\[dispatch\] ok task \S+\/task-[0-9a-f]{16} "task": running$/);
  });

  it('stopped by the stop Signal while its workspace is prepared ends cancelled / interrupted, and its parent learns it', async () => {
    const prepare = new Hold();
    const { outcome, trace, stateDir } = await run(
      input([dispatch, waitTask('wait'), final('done')], [read('read'), final('done')]),
      async (h) => {
        await prepare.reached;
        await sendStop(await taskHandle(h), 'the user stops it', 'test:stop');
        await untilEnded(h);
        prepare.release();
      },
      prepare.on('prepareWorkspace', (i) => i.from_run !== undefined),
    );
    expect(outcome.record).toMatchObject({ status: 'completed', tasks: [{ status: 'cancelled', reason: 'interrupted' }] });
    expect(observed(trace, 'wait')).toMatchObject([{ ok: true, data: { tasks: [{ status: 'cancelled', reason: 'interrupted' }] } }]);
    const child = await taskRun(outcome);
    expect(child.record).toMatchObject({ status: 'cancelled', reason: 'interrupted', turns: 0 });
    expect(traceIn(stateDir, child.state.run_id).find((e) => e.type === 'stop_received')?.data).toEqual({ reason: 'the user stops it' });
  });

  it('interrupted and steered while its workspace is prepared: its first request reads both, its reply runs, the task completes', async () => {
    const prepare = new Hold();
    const { outcome, stateDir } = await run(
      input([dispatch, waitTask('wait'), final('done')], [read('read'), final('done')]),
      async (h) => {
        await prepare.reached;
        const task = await taskHandle(h);
        await sendSteer(task, 'keep value() as it is', 'test:steer');
        await sendInterrupt(task, 'wait for me', 'test:interrupt');
        await waitFor('the messages to be taken', async () => (await traceOf(task)).some((e) => e.type === 'interrupt_received'));
        prepare.release();
      },
      prepare.on('prepareWorkspace', (i) => i.from_run !== undefined),
    );
    expect(outcome.record).toMatchObject({ status: 'completed', tasks: [{ status: 'completed' }] });
    const child = await taskRun(outcome);
    expect(child.record).toMatchObject({ status: 'completed', tool_calls: 1, tool_errors: {} });
    const childTrace = traceIn(stateDir, child.state.run_id);
    expect(requestOf(childTrace, 1)).toEqual(['keep value() as it is', 'interrupt: wait for me']);
    expect(observed(childTrace, 'read')).toMatchObject([{ ok: true }]);
  });

  it('stopped by the stop Signal while its write waits for approval ends cancelled / interrupted, the waiting call answered, nothing written', async () => {
    const { outcome, stateDir, ledgerEntries } = await run(
      input([dispatch, waitTask('asks'), waitTask('ends'), final('done')], [newTest('more'), final('done')]),
      async (h) => {
        const task = await taskHandle(h);
        await pendingApproval(task);
        await sendStop(task, 'enough', 'test:stop');
      },
    );
    expect(outcome.record).toMatchObject({ status: 'completed', tasks: [{ status: 'cancelled', reason: 'interrupted' }] });
    expect(ledgerEntries).toBe(0);
    const child = await taskRun(outcome);
    expect(child.record).toMatchObject({ status: 'cancelled', reason: 'interrupted', writes: 0 });
    expect(observed(traceIn(stateDir, child.state.run_id), 'more')).toMatchObject([
      { ok: false, error: 'interrupted', data: { run_end: 'interrupted' } },
    ]);
  });

  it('stopped by stop_task during its long test run: the test process tree is gone within seconds and the task is reported stopped', async () => {
    holdTests(true);
    const parentTurn = new Hold();
    const { outcome, trace, stateDir } = await run(
      input([dispatch, stopTask, final('stopped it')], [runTests('tests'), final('done')]),
      async () => {
        const pids = await heldTree();
        parentTurn.release();
        await gone(pids);
        holdTests(false);
      },
      parentTurn.on('localDecide', (_q, i) => i.orchestrating === true && i.turn === 2),
    );
    expect(observed(trace, 'stop-task')).toMatchObject([{ ok: true, data: { status: 'cancelled', reason: 'interrupted' } }]);
    const child = await taskRun(outcome);
    expect(child.record).toMatchObject({ status: 'cancelled', reason: 'interrupted', tool_calls: 1 });
    expect(observed(traceIn(stateDir, child.state.run_id), 'tests')).toMatchObject([
      { ok: false, error: 'interrupted', data: { run_end: 'interrupted' } },
    ]);
  });

  it('interrupted and steered while its write waits for approval: the waiting call answered interrupted, the steer read, the task completed and its parent told', async () => {
    const { outcome, trace, stateDir, ledgerEntries } = await run(
      input([dispatch, waitTask('asks'), waitTask('ends'), final('done')], [newTest('more'), read('after'), final('done')]),
      async (h) => {
        const task = await taskHandle(h);
        await pendingApproval(task);
        await sendSteer(task, 'no new test file', 'test:steer');
        await sendInterrupt(task, 'skip that write', 'test:interrupt');
      },
    );
    expect(outcome.record).toMatchObject({ status: 'completed', tasks: [{ status: 'completed' }] });
    expect(observed(trace, 'ends')).toMatchObject([{ ok: true, data: { tasks: [{ status: 'completed' }] } }]);
    expect(ledgerEntries).toBe(0);
    const child = await taskRun(outcome);
    expect(child.record).toMatchObject({ status: 'completed', writes: 0, tool_errors: { interrupted: 1 } });
    const childTrace = traceIn(stateDir, child.state.run_id);
    expect(observed(childTrace, 'more')).toMatchObject([
      { ok: false, error: 'interrupted', data: { reason: 'not executed: skip that write' } },
    ]);
    expect(requestOf(childTrace, 2)).toEqual(['no new test file']);
    expect(observed(childTrace, 'after')).toMatchObject([{ ok: true }]);
  });

  it('interrupted and steered during its long test run behaves as a run does: the test cut off, the steer read, the task completed', async () => {
    holdTests(true);
    const { outcome, stateDir } = await run(
      input([dispatch, waitTask('wait'), final('done')], [runTests('tests'), read('after'), final('done')]),
      async (h) => {
        const pids = await heldTree();
        const task = await taskHandle(h);
        await steerAndCut(task, pids, 'read the source', 'too slow');
      },
    );
    expect(outcome.record).toMatchObject({ status: 'completed', tasks: [{ status: 'completed' }] });
    const child = await taskRun(outcome);
    const childTrace = traceIn(stateDir, child.state.run_id);
    expect(observed(childTrace, 'tests')).toMatchObject([{ ok: false, error: 'interrupted', data: { reason: 'cut off: too slow' } }]);
    expect(requestOf(childTrace, 2)).toEqual(['read the source']);
  });

  it("stopped by the stop Signal during its verification: the verifier's tests are gone and the task ends cancelled / interrupted", async () => {
    holdTests(true);
    const { outcome, stateDir } = await run(input([dispatch, waitTask('wait'), final('done')], [final('done')]), async (h) => {
      const pids = await heldTree();
      const task = await taskHandle(h);
      expect((await queryState(task)).status).toBe('verifying');
      await sendStop(task, 'enough', 'test:stop');
      await gone(pids);
      holdTests(false);
    });
    expect(outcome.record).toMatchObject({ status: 'completed', tasks: [{ status: 'cancelled', reason: 'interrupted' }] });
    const child = await taskRun(outcome);
    expect(child.state.verification).toBeNull();
    expect(types(traceIn(stateDir, child.state.run_id)).slice(-3)).toEqual(['verification_started', 'stop_received', 'run_finished']);
  });

  it('interrupted and steered during its verification: the verifier cut off, its tests gone, the task goes on to a second final', async () => {
    holdTests(true);
    const { outcome, stateDir } = await run(
      input([dispatch, waitTask('wait'), final('done')], [final('first'), final('second')]),
      async (h) => {
        const pids = await heldTree();
        const task = await taskHandle(h);
        expect((await queryState(task)).status).toBe('verifying');
        await steerAndCut(task, pids, 'also look at the tests', 'not yet');
      },
    );
    expect(outcome.record).toMatchObject({ status: 'completed', tasks: [{ status: 'completed' }] });
    const child = await taskRun(outcome);
    expect(child.record).toMatchObject({ status: 'completed', turns: 2 });
    expect(child.state.final_summary).toBe('second');
    const childTrace = traceIn(stateDir, child.state.run_id);
    expect(childTrace.find((e) => e.type === 'final_interrupted')?.data).toEqual({ reason: 'not yet', during: 'verification' });
    expect(requestOf(childTrace, 2)).toEqual(['also look at the tests', 'interrupt: not yet (your final answer was not verified)']);
  });

  it('interrupted and steered between two segments of continue-as-new: its next segment answers the carried write interrupted and reads the steer', async () => {
    const boundary = new Hold();
    const { outcome, stateDir } = await run(
      input([dispatch, waitTask('asks'), waitTask('ends'), final('done')], [newTest('more'), read('after'), final('done')]),
      async (h) => {
        const task = await taskHandle(h);
        await growUntil(task, boundary);
        await sendSteer(task, 'no new test file', 'test:steer');
        await sendInterrupt(task, 'skip that write', 'test:interrupt');
        boundary.release();
      },
      boundary.on('persist', continuing),
    );
    expect(outcome.record).toMatchObject({ status: 'completed', tasks: [{ status: 'completed' }] });
    const child = await taskRun(outcome);
    expect(child.record).toMatchObject({ status: 'completed', writes: 0, tool_errors: { interrupted: 1 } });
    expect(child.state.segment).toBe(2);
    const childTrace = traceIn(stateDir, child.state.run_id);
    expect(after(childTrace, isType('continued_as_new'), isType('interrupt_received'))).toBe(true);
    expect(observed(childTrace, 'more')).toMatchObject([
      { ok: false, error: 'interrupted', data: { reason: 'not executed: skip that write' } },
    ]);
    expect(requestOf(childTrace, 2)).toEqual(['no new test file']);
  });

  it('stopped by the stop Signal between two segments of continue-as-new ends cancelled / interrupted, the waiting call answered', async () => {
    const boundary = new Hold();
    const { outcome, stateDir } = await run(
      input([dispatch, waitTask('asks'), waitTask('ends'), final('done')], [newTest('more'), final('done')]),
      async (h) => {
        const task = await taskHandle(h);
        await growUntil(task, boundary);
        await sendStop(task, 'enough', 'test:stop');
        await untilEnded(h);
        boundary.release();
      },
      boundary.on('persist', continuing),
    );
    expect(outcome.record).toMatchObject({ status: 'completed', tasks: [{ status: 'cancelled', reason: 'interrupted' }] });
    const child = await taskRun(outcome);
    expect(child.state.segment).toBe(1);
    const childTrace = traceIn(stateDir, child.state.run_id);
    expect(after(childTrace, isType('continued_as_new'), isType('stop_received'))).toBe(true);
    expect(observed(childTrace, 'more')).toMatchObject([{ ok: false, error: 'interrupted', data: { run_end: 'interrupted' } }]);
  });
});
