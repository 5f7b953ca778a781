/**
 * A full disk, for real: a run's workspace and its state folder on small file systems this test
 * makes (size-capped tmpfs, as root; unmounted after each test), filled to the last byte during a
 * write, a test run and a store commit. A step that finds no space left waits for it: freed in
 * time, the run completes with exactly one write and one receipt per approved action; not freed,
 * it ends `disk_full` naming the owner, every target as before and the ledger saying not written.
 * A full workspace during a write and a full state folder during a store commit are tried again with
 * the runs on a PostgreSQL cluster of the test's own instead of the dev server.
 * Also: a test run whose heartbeats stop ends with its record and reason, the workspace limit
 * refuses a write and stops a test process, and `run --wait --json` on the embedded default says
 * what is wrong while its state folder is full, then prints the record once space is freed.
 */
import { spawn, spawnSync } from 'node:child_process';
import { closeSync, cpSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { WorkflowHandle } from '@temporalio/client';
import type { RunInput, ToolResult } from '../core/contracts';
import type { TraceEvent } from '../core/trace';
import type { Receipt } from '../store/ledger';
import { freeBytes } from '../host/disk';
import { sha256 } from '../host/digest';
import { runPaths } from '../workspace/workspace';
import { timeoutDetail } from '../core/failures';
import { preparePatch } from '../tools/apply_patch';
import { runTests } from '../tools/run_tests';
import { approvalFor, queryState, runProgress, sendApproval } from '../client/run-access';
import { freePort, LINKCHECK, PROJECT_ROOT, prepareRun, SETTINGS, tempDir } from './helpers/run-dir';
import { activityAttempts, withLedger } from './helpers/faults';
import { clusterEnvironment } from '../scripts/support/servers';
import {
  approveAll,
  CANONICAL_RECORD,
  canonicalInput,
  pendingApproval,
  runOnce,
  startServer,
  stopEmbedded,
  waitFor,
  writeReplay,
  type RunOnceOptions,
} from './helpers/temporal';

const ADDED_TEST = 'tests/test_agent_nested.py'; // the canonical run's first write (a new file)
const MiB = 1024 * 1024;
/** What a write into a full workspace, and a store commit into a full state folder, wait with. */
const WORKSPACE_FULL_AT_WRITE =
  /^writePatch: no space left on the file system of the workspace \(writing tests\/test_agent_nested\.py through the control folder\): ENOSPC; waiting for space \(attempt 1\)$/;
const STATE_FULL_AT_COMMIT =
  /^executeTool: no space left on the file system of the state folder \(the host store\): SQLITE_FULL; waiting for space/;

let env: TestWorkflowEnvironment;
beforeAll(async () => {
  env = await startServer();
});
afterAll(async () => {
  await env?.teardown();
});

/** File systems mounted by the test now going, innermost last. */
const mounted: string[] = [];

/** A size-capped tmpfs on `dir`; the machine must let this test mount (root), or the test fails saying so. */
function smallFileSystem(dir: string, bytes: number): void {
  mkdirSync(dir, { recursive: true });
  const r = spawnSync('mount', ['-t', 'tmpfs', '-o', `size=${bytes},mode=0755`, 'tmpfs', dir], { encoding: 'utf8' });
  if (r.status !== 0)
    throw new Error(
      `cannot make a small file system on ${dir} with mount -t tmpfs (it needs root): ${r.stderr?.trim() || r.error?.message}`,
    );
  mounted.push(dir);
}

afterEach(() => {
  for (const dir of mounted.splice(0).reverse()) {
    if (spawnSync('umount', [dir]).status !== 0) spawnSync('umount', ['-l', dir]);
  }
});

/** Fills the file system of `dir` to its last byte; returns what frees it again. */
function fill(dir: string): () => void {
  const file = join(dir, `.filler-${process.pid}`);
  const fd = openSync(file, 'a');
  try {
    for (let chunk = MiB; chunk >= 1;) {
      try {
        writeSync(fd, Buffer.alloc(chunk));
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
        chunk = Math.floor(chunk / 2);
      }
    }
  } finally {
    closeSync(fd);
  }
  expect(freeBytes(dir)).toBe(0);
  return () => rmSync(file, { force: true });
}

/** The worker's settings with a step waiting `seconds` for space. */
const waiting = (seconds: number) => ({ ...SETTINGS, diskFullWaitS: seconds });

/** The last failure of `activity` while Temporal retries it because the disk is full. */
const waitingForSpace = (handle: WorkflowHandle, activity: string) =>
  waitFor(
    `${activity} to wait for space`,
    async () => (await runProgress(handle)).retried.find((s) => s.activity === activity && s.type === 'DiskFull')?.failure,
    60_000,
  );

/** A state folder (8 MiB) and, when asked, its runs' folders (`runs/`, 8 MiB) each on a small file system of its own. */
function smallState(o: { state: boolean; runs: boolean }) {
  const dirs = { state: '', runs: '' };
  const prepareState = (dir: string) => {
    dirs.state = dir;
    dirs.runs = join(dir, 'runs');
    if (o.state) smallFileSystem(dir, 8 * MiB);
    if (o.runs) smallFileSystem(dirs.runs, 8 * MiB);
  };
  return { dirs, prepareState };
}

/** Each approved action written once and receipted once, in the trace and in the ledger. */
function oncePerApprovedAction(trace: TraceEvent[], receipts: Receipt[]): void {
  const ids = (type: string) =>
    trace
      .filter((e) => e.type === type && (type !== 'approval_recorded' || (e.data as { decision: string }).decision === 'approve'))
      .map((e) => e.action_id)
      .sort();
  const approved = ids('approval_recorded');
  expect(approved).toHaveLength(2);
  expect(ids('action_written')).toEqual(approved);
  expect(ids('action_receipt')).toEqual(approved);
  expect(receipts.map((r) => r.action_id).sort()).toEqual(approved);
}

/**
 * The canonical fixture with a `conftest.py` of its own: `held` makes every test run wait (at
 * collection) until `go()`, saying so in `waiting()`; `body` replaces it altogether.
 */
function linkcheckWith(body?: string) {
  const dir = join(tempDir('disk-fixture'), 'linkcheck-nested');
  cpSync(LINKCHECK, dir, { recursive: true });
  const gate = tempDir('gate');
  // Held from the red test run on (the run's test is there), not in the base run before it.
  const held = [
    'import os, time',
    "if os.path.exists('tests/test_agent_nested.py'):",
    `    open(${JSON.stringify(join(gate, 'waiting'))}, "w").close()`,
    '    for _ in range(1200):',
    `        if os.path.exists(${JSON.stringify(join(gate, 'go'))}):`,
    '            break',
    '        time.sleep(0.05)',
    '',
  ].join('\n');
  writeFileSync(join(dir, 'repo', 'tests', 'conftest.py'), body ?? held);
  return {
    dir,
    replay: join(dir, 'replays', 'canonical.json'),
    waiting: () => existsSync(join(gate, 'waiting')),
    go: () => writeFileSync(join(gate, 'go'), ''),
  };
}

const heldInput = (fixture: ReturnType<typeof linkcheckWith>): RunInput =>
  canonicalInput('canonical', { fixture: fixture.dir, source: { kind: 'replay', path: fixture.replay, trusted: true } });

/** While the write waits for space: its intent is in the ledger, no receipt, one `not_written` row saying why. */
const notWrittenForSpace = (state: string, actionId: string) =>
  expect(
    withLedger(state, (l) => ({
      intent: l.hasIntent(actionId),
      receipt: l.receipt(actionId),
      not_written: l.notWritten(actionId).map((r) => r.reason),
    })),
  ).toEqual({ intent: true, receipt: null, not_written: ['disk_full'] });

/**
 * The canonical run, its first write approved while `which` file system is full: the write waits
 * for space with `failure`, nothing of it is made (`whileFull` looks further), then space is
 * freed and the run completes with one write and one receipt per approved action.
 */
async function writeWaitsForSpace(which: 'runs' | 'state', failure: RegExp, whileFull?: (state: string, actionId: string) => void) {
  const small = smallState({ state: which === 'state', runs: true });
  const { outcome, trace, receipts } = await runOnce(env, canonicalInput('canonical', { approver: 'interactive' }), {
    settings: waiting(30),
    prepareState: small.prepareState,
    drive: async (h) => {
      const first = await pendingApproval(h);
      const paths = runPaths(small.dirs.state, (await queryState(h)).run_id);
      const free = fill(small.dirs[which]);
      await sendApproval(h, approvalFor(first, 'approve', 'user:test'));
      expect(await waitingForSpace(h, 'writePatch')).toMatch(failure);
      // Nothing half made: no target, no temporary file.
      expect(existsSync(join(paths.workspace, ADDED_TEST))).toBe(false);
      expect(readdirSync(paths.tmp).filter((n) => n.startsWith(first.action_id))).toEqual([]);
      whileFull?.(small.dirs.state, first.action_id);
      free();
      await approveAll(h);
    },
  });
  expect(outcome.record).toEqual(CANONICAL_RECORD);
  oncePerApprovedAction(trace, receipts);
}

/**
 * The canonical run with its red test run held while `which` file system is filled: the step
 * (the process's end, or the store commit of its result) waits for space with `failure`; freed,
 * the tests run again and the run completes with one write and one receipt per approved action.
 */
async function testRunWaitsForSpace(which: 'runs' | 'state', failure: RegExp) {
  const small = smallState({ state: which === 'state', runs: true });
  const fixture = linkcheckWith();
  const { outcome, trace, receipts } = await runOnce(env, heldInput(fixture), {
    settings: waiting(16),
    prepareState: small.prepareState,
    drive: async (h) => {
      await waitFor('the red test run to be under way', async () => fixture.waiting(), 60_000);
      const free = fill(small.dirs[which]);
      fixture.go();
      expect(await waitingForSpace(h, 'executeTool')).toMatch(failure);
      free();
    },
  });
  expect(outcome.record).toEqual(CANONICAL_RECORD);
  oncePerApprovedAction(trace, receipts);
}

describe('a full workspace', () => {
  it('during a write: the target stays as it was and the ledger says not written; freed, the run completes with one write and one receipt each', async () => {
    await writeWaitsForSpace('runs', WORKSPACE_FULL_AT_WRITE, notWrittenForSpace);
  });

  it('during a write, never freed: the run ends disk_full naming the workspace, the target as before, the ledger saying not written', async () => {
    const small = smallState({ state: false, runs: true });
    let actionId = '';
    const { outcome, trace, receipts, stateDir, runId } = await runOnce(env, canonicalInput('canonical', { approver: 'interactive' }), {
      settings: waiting(2),
      prepareState: small.prepareState,
      drive: async (h) => {
        const first = await pendingApproval(h);
        actionId = first.action_id;
        fill(small.dirs.runs);
        await sendApproval(h, approvalFor(first, 'approve', 'user:test'));
      },
    });
    expect(outcome.record).toMatchObject({ status: 'failed', reason: 'disk_full', writes: 0, receipts: 0 });
    expect(outcome.state.detail).toMatch(
      /^writePatch: no space left on the file system of the workspace \(writing tests\/test_agent_nested\.py through the control folder\): ENOSPC; still full after \d+ s and \d+ attempt\(s\)$/,
    );
    expect(trace.at(-1)).toMatchObject({ type: 'run_finished', data: { status: 'failed', reason: 'disk_full' } });
    expect(trace.find((e) => e.type === 'tool_observed' && e.call_id === 'add-test')?.data).toMatchObject({
      ok: false,
      error: 'interrupted',
      data: { run_end: 'disk_full' },
    });
    expect(existsSync(join(runPaths(stateDir, runId).workspace, ADDED_TEST))).toBe(false);
    expect(receipts).toEqual([]);
    const rows = withLedger(stateDir, (l) => l.notWritten(actionId));
    expect(rows.length).toBeGreaterThanOrEqual(2); // one per attempt
    expect(rows.every((r) => r.reason === 'disk_full' && r.detail.includes('the workspace'))).toBe(true);
  });

  it('during a test run: the result is not trusted, the test run waits for space and runs again once it is freed', async () => {
    await testRunWaitsForSpace(
      'runs',
      /^executeTool: no space left on the file system of the workspace \(a test or acceptance process: \d+ bytes were left when it ended\): ENOSPC; waiting for space/,
    );
  });
});

describe('a full state folder', () => {
  it('during a write: the host store cannot keep the content, so no intent is recorded and nothing is written; freed, the run completes with one write and one receipt each', async () => {
    // (The content is kept before the intent, so whatever has an intent has its content: a fork restores it.
    // The ledger is on the same full file system: it is read once space is freed, in the record's receipts.)
    await writeWaitsForSpace(
      'state',
      /^writePatch: no space left on the file system of the state folder \(the host store\): SQLITE_FULL; waiting for space/,
    );
  });

  it('during a store commit: the test run waits for space and runs again once it is freed', async () => {
    await testRunWaitsForSpace('state', STATE_FULL_AT_COMMIT);
  });

  it('during a store commit, never freed: the run ends disk_full naming the state folder, its record whole though its trace could not be stored', async () => {
    const small = smallState({ state: true, runs: true });
    const fixture = linkcheckWith();
    const { outcome, trace } = await runOnce(env, heldInput(fixture), {
      settings: waiting(2),
      prepareState: small.prepareState,
      drive: async () => {
        await waitFor('the red test run to be under way', async () => fixture.waiting(), 60_000);
        fill(small.dirs.state);
        fixture.go();
      },
    });
    expect(outcome.record).toMatchObject({ status: 'failed', reason: 'disk_full', writes: 1, receipts: 1 });
    expect(outcome.state.detail).toMatch(
      /^executeTool: no space left on the file system of the state folder \(the host store\): SQLITE_FULL; still full after \d+ s and \d+ attempt\(s\); trace not stored: persist: no space left on the file system of the state folder \(the host store\): SQLITE_FULL; still full after \d+ s and 1 attempt\(s\)$/,
    );
    // The end is in the record (and in history), not in the full store.
    expect(trace.map((e) => e.type)).not.toContain('run_finished');
  });
});

describe('on a cluster (PostgreSQL, SQL visibility) rather than the dev server', () => {
  let dev: TestWorkflowEnvironment;
  beforeAll(async () => {
    dev = env;
    env = await clusterEnvironment();
  }, 180_000);
  afterAll(async () => {
    await env?.teardown();
    env = dev;
  });

  it('a full workspace during a write: the target as before, the ledger says not written; freed, one write and one receipt each', async () => {
    await writeWaitsForSpace('runs', WORKSPACE_FULL_AT_WRITE, notWrittenForSpace);
  });

  it('a full state folder during a store commit: the test run waits for space and runs again once it is freed', async () => {
    await testRunWaitsForSpace('state', STATE_FULL_AT_COMMIT);
  });
});

describe('a test run whose heartbeats stop', () => {
  it('ends with its record: infrastructure_error, the test run stopped heartbeating, after its three attempts', async () => {
    const fixture = linkcheckWith('import time\ntime.sleep(14)\n');
    const path = writeReplay([
      { kind: 'tool', call: { call_id: 'stalled', name: 'run_tests', arguments: { preset: 'candidate_tests' } } },
      { kind: 'final', text: 'x' },
    ]);
    const options: RunOnceOptions = {
      // The tests run for real; the activity is never told they progress, as if its worker hung.
      wrapBackend: (backend) => ({ name: backend.name, exec: (spec) => backend.exec({ ...spec, onProgress: undefined }) }),
    };
    const { outcome, trace, handle } = await runOnce(
      env,
      { fixture: fixture.dir, source: { kind: 'replay', path, trusted: true }, backend: 'local', approver: 'policy:approve-writable' },
      options,
    );
    expect(outcome.record).toMatchObject({ status: 'failed', reason: 'infrastructure_error' });
    expect(outcome.state.detail).toBe(timeoutDetail('executeTool', 'HEARTBEAT'));
    expect(outcome.state.detail).toBe('the test run stopped heartbeating on each of its attempts (the worker died or hung each time)');
    const observed = trace.filter((e) => e.type === 'tool_observed' && e.call_id === 'stalled');
    expect(observed.map((e) => e.data)).toEqual([
      expect.objectContaining({ ok: false, error: 'interrupted', data: expect.objectContaining({ run_end: 'infrastructure_error' }) }),
    ]);
    expect(trace.at(-1)).toMatchObject({ type: 'run_finished', data: { status: 'failed', reason: 'infrastructure_error' } });
    expect((await activityAttempts(handle)).filter((a) => a.type === 'executeTool').map((a) => a.attempt)).toEqual([3]);
    expect((await handle.fetchHistory()).events!.filter((e) => e.activityTaskTimedOutEventAttributes)).toHaveLength(1);
  });
});

describe('the workspace limit', () => {
  /** The linkcheck repository's bytes (its files' sizes). */
  const repoBytes = () =>
    ['src/linkcheck.py', 'README.md', 'tests/test_linkcheck.py', 'notes.txt']
      .map((p) => readFileSync(join(LINKCHECK, 'repo', p)).length)
      .reduce((a, b) => a + b, 0);

  it('refuses a write that would take the workspace over it with too_large, writing nothing, and lets a workspace over it shrink', async () => {
    const t = prepareRun({ repo: join(LINKCHECK, 'repo'), limits: { workspaceBytes: repoBytes() + 100 } });
    const before = t.digest();
    const big = { path: 'tests/test_agent_big.py', version: 'absent', old: '', new: `# ${'x'.repeat(200)}\n` };
    const refused = await preparePatch(t.ctx, 'big', big);
    expect(refused).toMatchObject({ kind: 'rejected', result: { ok: false, error: 'too_large' } });
    const data = (refused as { result: ToolResult }).result.data as { reason: string; workspace_bytes: number; limit: number };
    expect(data).toMatchObject({ workspace_bytes: repoBytes() + big.new.length, limit: repoBytes() + 100 });
    expect(data.reason).toMatch(/over its limit of \d+ bytes \(the workspace limit\): write less, or remove files first/);
    expect(t.digest()).toBe(before);
    expect(t.ledger.entries('run-1')).toBe(0);
    // Already over (a limit below its base tree): a write that does not grow it is prepared.
    const over = prepareRun({ repo: join(LINKCHECK, 'repo'), limits: { workspaceBytes: 10 } });
    const source = readFileSync(join(over.workspace, 'src/linkcheck.py'), 'utf8');
    const shrink = await preparePatch(over.ctx, 'shrink', {
      path: 'src/linkcheck.py',
      version: sha256(source),
      old: '"""Report relative links in Markdown files whose target does not exist."""\n',
      new: '"""Report broken relative links."""\n',
    });
    expect(shrink.kind).toBe('prepared');
    const grow = await preparePatch(over.ctx, 'grow', {
      path: 'src/linkcheck.py',
      version: sha256(source),
      old: '"""Report relative links in Markdown files whose target does not exist."""\n',
      new: '"""Report relative links in Markdown files whose target does not exist, and say why."""\n',
    });
    expect(grow).toMatchObject({ kind: 'rejected', result: { error: 'too_large' } });
  });

  it('stops a test process that writes past it, undoes what it wrote and says so (local backend)', async () => {
    const t = prepareRun({
      repo: {
        'tests/test_fill.py':
          'import time\n\ndef test_fills():\n    with open("fill.bin", "wb") as f:\n        for _ in range(64):\n            f.write(b"x" * 65536)\n    time.sleep(60)\n',
      },
      fixture: {
        tests: { command: ['python3', '-m', 'pytest', '-q', '-p', 'no:cacheprovider', 'tests'], format: 'pytest', timeout_s: 120 },
      },
      limits: { workspaceBytes: MiB },
    });
    const before = t.digest();
    const result = await runTests(t.ctx, 'fill');
    expect(result).toMatchObject({ ok: false, error: 'tests_incomplete', data: { status: 'error', unreceipted: { paths: ['fill.bin'] } } });
    const detail = (result.data as { detail: string }).detail;
    expect(detail).toMatch(
      /^the process wrote past the workspace limit \(\d+ bytes in the workspace and its report folder, over 1048576: the workspace limit, limits\.workspaceBytes\): it was stopped and its changes undone$/,
    );
    expect(t.digest()).toBe(before);
  });
});

describe('run --wait --json on the embedded default while its state folder is full', () => {
  let stateDir = '';
  let port = 0;
  afterEach(async () => {
    if (stateDir) await stopEmbedded(stateDir, port, { wait: true });
  });

  it('names the server’s error and the full disk while it keeps following, then prints the record once space is freed', async () => {
    stateDir = join(tempDir('agent-cli-disk'), 'state');
    smallFileSystem(stateDir, 64 * MiB);
    const fixture = linkcheckWith();
    const cliEnv: NodeJS.ProcessEnv = {
      ...process.env,
      AGENT_STATE_DIR: stateDir,
      AGENT_DEV_SERVER_PORT: String((port = await freePort())),
      AGENT_DEV_UI_PORT: String(await freePort()),
      AGENT_DISK_FULL_WAIT_S: '20',
    };
    delete cliEnv.TEMPORAL_ADDRESS;
    const command = spawn(
      process.execPath,
      [
        join(PROJECT_ROOT, 'dist', 'client', 'cli.js'),
        'run',
        fixture.dir,
        '--replay',
        fixture.replay,
        '--trust-replay',
        '--approver',
        'policy:approve-writable',
        '--wait',
        '--json',
        '--id',
        `disk-full-${process.pid}`,
      ],
      { env: cliEnv, cwd: PROJECT_ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let stdout = '';
    let stderr = '';
    command.stdout.on('data', (c: Buffer) => (stdout += c.toString('utf8')));
    command.stderr.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
    const exited = new Promise<number | null>((resolve) => command.once('exit', (code) => resolve(code)));
    try {
      await waitFor('the red test run to be under way', async () => fixture.waiting(), 120_000);
      const free = fill(stateDir);
      fixture.go();
      await waitFor(
        'the command to say what is wrong',
        async () => /\(the Temporal server does not answer yet: .*; the state folder's file system is full/.test(stderr),
        60_000,
      );
      free();
      expect(await exited).toBe(0);
    } finally {
      command.kill('SIGKILL');
    }
    expect(JSON.parse(stdout)).toEqual(CANONICAL_RECORD);
    const note = stderr.split('\n').find((l) => l.startsWith('(the Temporal server does not answer yet'))!;
    expect(note).toMatch(
      /^\(the Temporal server does not answer yet: Failed to describe workflow: .+; the state folder's file system is full \(\d+ bytes free\): the embedded Temporal dev server cannot write its database there, nor the worker its ledger and host store; the run goes on once space is freed; still following\)$/,
    );
    expect(stderr).not.toMatch(/^error:/m);
  });
});
