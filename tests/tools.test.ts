import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { linkSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import { createTwoFilesPatch } from 'diff';
import { createActivities } from '../activities';
import { CappedOutput } from '../sandbox/backends/capped-output';
import { DEFAULT_LIMITS, DEFAULT_REPOSITORY_LIMITS } from '../core/limits';
import { sha256 } from '../host/digest';
import { Store } from '../store/store';
import { preparePatch, writePatch } from '../tools/apply_patch';
import { readFile } from '../tools/read_file';
import { search } from '../tools/search';
import { showDiff } from '../tools/show_diff';
import { runTests } from '../tools/run_tests';
import { canonicalJson } from '../core/canonical';
import { fileDiff, filesDiff } from '../workspace/diff';
import type { CallView, ResultView } from '../core/transcript';
import { LINKCHECK, prepareRun, tempDir, type TestRun, localBackend } from './helpers/run-dir';
import type { RunRef } from '../core/activities';

const SRC = 'def check(root):\n    return root / target\n\n\ndef other():\n    return 1\n';

function run(extra: Record<string, string> = {}): TestRun {
  return prepareRun({
    repo: { 'src/linkcheck.py': SRC, 'notes.txt': 'my notes\n', 'tests/test_a.py': 'def test_a():\n    assert True\n', ...extra },
  });
}

/** Asserts a rejection: the code, an unchanged workspace and no ledger entry. */
function expectRejected(t: TestRun, outcome: Awaited<ReturnType<typeof preparePatch>>, code: string, digestBefore: string) {
  expect(outcome.kind).toBe('rejected');
  if (outcome.kind === 'rejected') expect(outcome.result.error).toBe(code);
  expect(t.digest()).toBe(digestBefore);
  expect(t.ledger.entries(t.ctx.runId)).toBe(0);
}

describe('read_file', () => {
  it('returns the text, the whole-file version and line bounds', async () => {
    const t = run();
    const r = readFile(t.ctx, 'r', { path: 'src/linkcheck.py', start: 2, end: 2 });
    expect(r).toEqual({
      call_id: 'r',
      ok: true,
      error: null,
      truncated: false,
      data: { text: '    return root / target\n', version: sha256(SRC), total_lines: 6, start: 2, end: 2 },
    });
  });

  it('cuts at whole lines under the cap and says so', async () => {
    const t = prepareRun({
      repo: { 'big.txt': 'x'.repeat(99) + '\n' + 'y'.repeat(99) + '\n' + 'z'.repeat(99) + '\n' },
      limits: { readBytes: 256 },
    });
    const r = readFile(t.ctx, 'r', { path: 'big.txt' });
    expect(r.truncated).toBe(true);
    expect(r.data).toMatchObject({ start: 1, end: 2, total_lines: 3 });
    expect(Buffer.byteLength((r.data as { text: string }).text)).toBeLessThanOrEqual(256);
  });

  it('reports not_found, too_large and binary_file', async () => {
    const t = prepareRun({ repo: { 'a.bin': '\u0000\u0001', 'big.txt': 'x'.repeat(2000) }, limits: { maxFileBytes: 1000 } });
    expect(readFile(t.ctx, 'r', { path: 'missing.py' }).error).toBe('not_found');
    expect(readFile(t.ctx, 'r', { path: 'big.txt' }).error).toBe('too_large');
    expect(readFile(t.ctx, 'r', { path: 'a.bin' }).error).toBe('binary_file');
  });
});

describe('path safety on disk', () => {
  it('denies a symlink inside the repo pointing outside it, and a symlink chain', async () => {
    const outside = tempDir('outside');
    writeFileSync(join(outside, 'secret.txt'), 'secret\n');
    const repo = join(tempDir('repo'), 'repo');
    mkdirSync(join(repo, 'docs'), { recursive: true });
    writeFileSync(join(repo, 'docs', 'a.md'), 'hello\n');
    symlinkSync(join(outside, 'secret.txt'), join(repo, 'leak.txt'));
    symlinkSync('leak.txt', join(repo, 'chain.txt'));
    symlinkSync(outside, join(repo, 'outdir'));
    const t = prepareRun({ repo });
    // The fixture's links are copied as links, never followed.
    expect(readFileSync(join(t.workspace, 'docs', 'a.md'), 'utf8')).toBe('hello\n');
    for (const path of ['leak.txt', 'chain.txt', 'outdir/secret.txt']) {
      const r = readFile(t.ctx, 'r', { path });
      expect(r.error).toBe('path_denied');
      expect(JSON.stringify(r)).not.toContain('secret\\n');
    }
    expect((await search(t.ctx, 's', { query: 'secret' })).data).toEqual({
      matches: [],
      skipped: [
        { path: 'chain.txt', reason: 'symlink' },
        { path: 'leak.txt', reason: 'symlink' },
        { path: 'outdir', reason: 'symlink' },
      ],
    });
  });

  it('denies a hardlink to a file outside the workspace', async () => {
    const t = run();
    const outside = join(tempDir('outside'), 'secret.txt');
    writeFileSync(outside, 'secret\n');
    linkSync(outside, join(t.workspace, 'hard.txt'));
    expect(readFile(t.ctx, 'r', { path: 'hard.txt' }).error).toBe('path_denied');
    const before = t.digest();
    expectRejected(
      t,
      await preparePatch(t.ctx, 'p', { path: 'hard.txt', version: sha256('secret\n'), old: 'secret', new: 'x' }),
      'path_denied',
      before,
    );
  });
});

describe('search', () => {
  it('finds literal matches sorted by path and line, skipping binary files', async () => {
    const t = run({ 'data.bin': 'return \u0000' });
    const r = await search(t.ctx, 's', { query: 'return' });
    expect(r.data).toEqual({
      matches: [
        { path: 'src/linkcheck.py', line: 2, text: '    return root / target' },
        { path: 'src/linkcheck.py', line: 6, text: '    return 1' },
      ],
      skipped: [{ path: 'data.bin', reason: 'binary or not UTF-8' }],
    });
    expect((await search(t.ctx, 's', { query: 'x', path: 'nope' })).error).toBe('not_found');
  });

  it('keeps whole matches under a small cap and marks the result truncated', async () => {
    const lines = Array.from({ length: 40 }, (_, i) => `needle ${i}`).join('\n');
    const t = prepareRun({ repo: { 'a.txt': lines }, limits: { searchBytes: 256 } });
    const r = await search(t.ctx, 's', { query: 'needle' });
    expect(r.truncated).toBe(true);
    const data = r.data as { matches: { text: string }[] };
    expect(Buffer.byteLength(JSON.stringify(data.matches))).toBeLessThanOrEqual(256);
    for (const m of data.matches) expect(m.text).toMatch(/^needle \d+$/);
  });

  it('marks the result truncated when it cuts a long matching line at 400 characters', async () => {
    const t = prepareRun({ repo: { 'short.txt': 'needle\n', 'long.txt': `needle ${'x'.repeat(1000)}\n` } });
    const r = await search(t.ctx, 's', { query: 'needle' });
    expect(r.truncated).toBe(true);
    expect((r.data as { matches: { path: string; text: string }[] }).matches.map((m) => [m.path, m.text.length])).toEqual([
      ['long.txt', 400],
      ['short.txt', 6],
    ]);
    expect((await search(t.ctx, 's', { query: 'needle', path: 'short.txt' })).truncated).toBe(false);
  });
});

describe('apply_patch prepare and write', () => {
  const v = sha256(SRC);

  it.each([
    ['a stale version', { path: 'src/linkcheck.py', version: sha256('other'), old: 'root / target', new: 'x' }, 'stale_version'],
    ['old not found', { path: 'src/linkcheck.py', version: v, old: 'nothing like this', new: 'x' }, 'no_match'],
    ['old found twice', { path: 'src/linkcheck.py', version: v, old: 'return', new: 'yield' }, 'non_unique_match'],
    ['old == new', { path: 'src/linkcheck.py', version: v, old: 'root', new: 'root' }, 'no_op'],
    ['a missing file', { path: 'src/missing.py', version: v, old: 'a', new: 'b' }, 'not_found'],
    ['creating an existing file', { path: 'src/linkcheck.py', version: 'absent', old: '', new: 'x' }, 'stale_version'],
    ['a folder', { path: 'src', version: v, old: 'a', new: 'b' }, 'invalid_fields'],
  ])('rejects %s with no side effect', async (_what, args, code) => {
    const t = run();
    expectRejected(t, await preparePatch(t.ctx, 'p', args), code, t.digest());
  });

  it('rejects a new text over the cap as too_large', async () => {
    const t = prepareRun({ repo: { 'src/linkcheck.py': SRC }, limits: { patchBytes: 10 } });
    expectRejected(
      t,
      await preparePatch(t.ctx, 'p', { path: 'src/linkcheck.py', version: v, old: 'root', new: 'x'.repeat(11) }),
      'too_large',
      t.digest(),
    );
  });

  it('prepares without writing, then writes once and records intent and receipt', async () => {
    const t = run();
    const args = { path: 'src/linkcheck.py', version: v, old: 'root / target', new: 'document.parent / target' };
    const before = t.digest();
    const prepared = await preparePatch(t.ctx, 'p', args);
    expect(prepared.kind).toBe('prepared');
    if (prepared.kind !== 'prepared') return;
    expect(t.digest()).toBe(before);
    expect(prepared.action).toMatchObject({
      path: 'src/linkcheck.py',
      before: v,
      after: sha256(SRC.replace('root / target', 'document.parent / target')),
      workspace_digest: before,
    });
    expect(prepared.action.diff).toContain('+    return document.parent / target');
    // The same proposal gives the same action_id.
    expect(((await preparePatch(t.ctx, 'p2', args)) as typeof prepared).action.action_id).toBe(prepared.action.action_id);

    expect(await writePatch(t.ctx, prepared.action, args)).toEqual({ kind: 'written', recovered: false });
    expect(sha256(readFileSync(join(t.workspace, 'src/linkcheck.py')))).toBe(prepared.action.after);
    expect(t.ledger.receipts('run-1')).toHaveLength(1);
    // A retry of the write is a no-op; a re-proposal is recognised as already written.
    expect(await writePatch(t.ctx, prepared.action, args)).toEqual({ kind: 'already_recorded', recovered: false });
    expect((await preparePatch(t.ctx, 'p3', args)).kind).toBe('already_written');
    expect(t.ledger.receipts('run-1')).toHaveLength(1);
  });

  it('observes approval_stale when the workspace changed after the approval, keeping the change', async () => {
    const t = run();
    const args = { path: 'src/linkcheck.py', version: v, old: 'root / target', new: 'document.parent / target' };
    const prepared = await preparePatch(t.ctx, 'p', args);
    if (prepared.kind !== 'prepared') throw new Error('not prepared');
    writeFileSync(join(t.workspace, 'src/linkcheck.py'), SRC + '# edited by a person\n');
    expect((await writePatch(t.ctx, prepared.action, args)).kind).toBe('approval_stale');
    expect(readFileSync(join(t.workspace, 'src/linkcheck.py'), 'utf8')).toContain('# edited by a person');
    expect(t.ledger.entries('run-1')).toBe(0);
  });

  it('recovers: records only the receipt when the target already has the after digest', async () => {
    const t = run();
    const args = { path: 'src/linkcheck.py', version: v, old: 'root / target', new: 'document.parent / target' };
    const prepared = await preparePatch(t.ctx, 'p', args);
    if (prepared.kind !== 'prepared') throw new Error('not prepared');
    // A crash after the rename and before the receipt leaves the intent and the new content.
    t.ledger.recordIntent('run-1', prepared.action);
    writeFileSync(join(t.workspace, 'src/linkcheck.py'), SRC.replace('root / target', 'document.parent / target'));
    expect(await writePatch(t.ctx, prepared.action, args)).toEqual({ kind: 'receipt_recovered', recovered: true });
    expect(t.ledger.receipts('run-1')).toEqual([expect.objectContaining({ recovered: true })]);
  });

  it('refuses to write when recovery finds neither the before nor the after digest', async () => {
    const t = run();
    const args = { path: 'src/linkcheck.py', version: v, old: 'root / target', new: 'document.parent / target' };
    const prepared = await preparePatch(t.ctx, 'p', args);
    if (prepared.kind !== 'prepared') throw new Error('not prepared');
    t.ledger.recordIntent('run-1', prepared.action);
    writeFileSync(join(t.workspace, 'src/linkcheck.py'), 'something else\n');
    expect((await writePatch(t.ctx, prepared.action, args)).kind).toBe('recovery_uncertain');
    expect(readFileSync(join(t.workspace, 'src/linkcheck.py'), 'utf8')).toBe('something else\n');
    expect(t.ledger.receipts('run-1')).toHaveLength(0);
  });

  it('cuts a diff over the cap at a line end and hands back the whole one, unless that is over its own cap', async () => {
    const text = Array.from({ length: 50 }, (_, i) => `line ${i}\n`).join('');
    const args = { path: 'tests/test_agent_x.py', version: 'absent', old: '', new: text };
    const whole = createTwoFilesPatch('/dev/null', 'b/tests/test_agent_x.py', '', text, undefined, undefined, { context: 3 });
    const at = async (limits: { diffBytes?: number; wholeDiffBytes?: number }) =>
      (await preparePatch(
        prepareRun({ repo: { 'src/linkcheck.py': SRC, 'tests/test_a.py': 'def test_a():\n    pass\n' }, limits }).ctx,
        'p',
        args,
      )) as Extract<Awaited<ReturnType<typeof preparePatch>>, { kind: 'prepared' }>;
    const cut = await at({ diffBytes: 200 });
    expect([cut.kind, cut.action.diff_truncated, cut.whole_diff]).toEqual(['prepared', true, whole]);
    expect([whole.startsWith(cut.action.diff), cut.action.diff.endsWith('\n'), Buffer.byteLength(cut.action.diff) <= 200]).toEqual([
      true,
      true,
      true,
    ]);
    expect(await at({ diffBytes: 200, wholeDiffBytes: Buffer.byteLength(whole) - 1 })).toMatchObject({
      whole_diff: null,
      action: { diff_truncated: true },
    });
    expect(await at({})).toMatchObject({ whole_diff: null, action: { diff: whole, diff_truncated: false } });
  });

  it('creates an allowed new file and shows it in the diff', async () => {
    const t = run();
    const args = { path: 'tests/test_agent_x.py', version: 'absent', old: '', new: 'def test_x():\n    pass\n' };
    const prepared = await preparePatch(t.ctx, 'p', args);
    if (prepared.kind !== 'prepared') throw new Error('not prepared');
    expect(prepared.action.before).toBe('absent');
    expect((await writePatch(t.ctx, prepared.action, args)).kind).toBe('written');
    const diff = await showDiff(t.ctx, 'd');
    expect(diff.data).toMatchObject({ paths: ['tests/test_agent_x.py'] });
    expect((diff.data as { diff: string }).diff).toContain('+def test_x():');
  });
});

describe('the one diff builder', () => {
  const patch = (a: string, b: string, before: string, after: string) =>
    createTwoFilesPatch(a, b, before, after, undefined, undefined, { context: 3 });

  it("builds a path's diff from its two sides: the text's unified diff, git's mode lines, git's binary line", () => {
    const plain = { mode: '100644' as const };
    expect(fileDiff('a.txt', { text: 'one\n', ...plain }, { text: 'two\n', ...plain })).toBe(patch('a/a.txt', 'b/a.txt', 'one\n', 'two\n'));
    expect(fileDiff('new.txt', null, { text: 'x\n', ...plain })).toBe(patch('/dev/null', 'b/new.txt', '', 'x\n'));
    expect(fileDiff('gone.txt', { text: 'x\n', ...plain }, null)).toBe(patch('a/gone.txt', '/dev/null', 'x\n', ''));
    expect(fileDiff('run.sh', null, { text: 'echo\n', mode: '100755' })).toBe(
      `new file mode 100755\n${patch('/dev/null', 'b/run.sh', '', 'echo\n')}`,
    );
    expect(fileDiff('run.sh', { text: 'echo\n', ...plain }, { text: 'echo\n', mode: '100755' })).toMatch(
      /^old mode 100644\nnew mode 100755\n/,
    );
    expect(fileDiff('b.dat', { text: 'x\n', ...plain }, { text: null, ...plain })).toBe('Binary files a/b.dat and b/b.dat differ\n');
  });

  it("gives a merge's files the diff show_diff gives the same change, byte for byte", async () => {
    const t = run({ 'data.bin': 'plain text\n' });
    const ws = t.ctx.paths.workspace;
    writeFileSync(join(ws, 'src/linkcheck.py'), SRC.replace('target', 'root / target'));
    writeFileSync(join(ws, 'data.bin'), Buffer.from([0, 1, 2, 255]));
    writeFileSync(join(ws, 'tests/run.sh'), 'echo run\n', { mode: 0o755 });
    const shown = (await showDiff(t.ctx, 'd')).data as { diff: string; paths: string[] };
    expect(shown.paths).toEqual(['data.bin', 'src/linkcheck.py', 'tests/run.sh']);
    expect(shown.diff).toContain('Binary files a/data.bin and b/data.bin differ\n');
    expect(shown.diff).toContain('new file mode 100755\n');
    const files = shown.paths.map((path) => ({ path, absent: path === 'tests/run.sh', executable: path === 'tests/run.sh' }));
    expect(filesDiff(t.ctx.paths.baseline, ws, files, DEFAULT_LIMITS.maxFileBytes)).toBe(shown.diff);
  });
});

describe('run_tests', () => {
  it('counts from the JUnit report: red, green, and zero tests as no_tests', async () => {
    const t = prepareRun({ repo: { 'tests/test_a.py': 'def test_a():\n    assert True\n\ndef test_b():\n    assert 1 == 2\n' } });
    const red = await runTests(t.ctx, 't');
    expect(red).toMatchObject({ ok: false, error: 'tests_failed', data: { status: 'failed', discovered: 2, passed: 1, failed: 1 } });
    expect((red.data as { failures: { test: string }[] }).failures[0].test).toBe('tests/test_a.py::test_b');

    const empty = prepareRun({ repo: { 'tests/readme.txt': 'no tests here\n' } });
    expect(await runTests(empty.ctx, 't')).toMatchObject({
      ok: false,
      error: 'tests_incomplete',
      data: { status: 'no_tests', discovered: 0 },
    });
  });

  it('reports a missing test runtime as an infrastructure error, never as no tests', async () => {
    const t = prepareRun({
      repo: { 'tests/test_a.py': 'def test_a():\n    pass\n' },
      fixture: { tests: { command: ['python-does-not-exist', '-m', 'pytest'], format: 'pytest', timeout_s: 30 } },
    });
    await expect(runTests(t.ctx, 't')).rejects.toThrow(/runtime not found: python-does-not-exist/);
  });

  it('stops a test that runs past its timeout and kills its process tree', async () => {
    // Out of the workspace, whose changes are undone after the run.
    const pidFile = join(tempDir('sleep-pid'), 'sleep.pid');
    const t = prepareRun({
      repo: {
        'tests/test_slow.py': `import subprocess, time\n\ndef test_slow():\n    child = subprocess.Popen(["sleep", "300"])\n    open(${JSON.stringify(pidFile)}, "w").write(str(child.pid))\n    time.sleep(300)\n`,
      },
      fixture: { tests: { command: ['python3', '-m', 'pytest', '-q', '-p', 'no:cacheprovider', 'tests'], format: 'pytest', timeout_s: 4 } },
    });
    const r = await runTests(t.ctx, 't');
    expect(r).toMatchObject({ ok: false, error: 'tests_incomplete', data: { status: 'timeout' } });
    // The grandchild was started (so the check below is not vacuous) and is gone, or a zombie, soon after.
    const pid = Number(readFileSync(pidFile, 'utf8'));
    const alive = () => {
      try {
        return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
      } catch {
        return false;
      }
    };
    for (let i = 0; i < 50 && alive(); i++) await new Promise((res) => setTimeout(res, 100));
    expect(alive()).toBe(false);
  });

  it('supports node:test through its JUnit reporter', async () => {
    const t = prepareRun({
      repo: {
        'test/a.test.js':
          "const test = require('node:test');\nconst assert = require('node:assert');\ntest('one', () => assert.ok(true));\ntest('two', () => assert.equal(1, 2));\n",
      },
      fixture: { tests: { command: ['node', '--test', 'test/'], format: 'node-test', timeout_s: 30 } },
    });
    expect(await runTests(t.ctx, 't')).toMatchObject({ error: 'tests_failed', data: { discovered: 2, passed: 1, failed: 1 } });
  });
});

describe('local activities (read-only steps without a server round trip)', () => {
  /** The activities of a worker of host `own`, over a prepared run whose state folder it shares. */
  function hostActivities(own: string) {
    const t = run();
    const stateDir = dirname(dirname(t.ctx.paths.root));
    const store = new Store(join(stateDir, 'store.sqlite'));
    const activities = createActivities({
      store,
      ledger: t.ledger,
      backends: { local: localBackend() },
      repositories: () => () => Promise.reject(new Error('no repository in this test')),
      config: {
        stateDir,
        providersFile: join(stateDir, 'providers.json'),
        credentialsFile: join(stateDir, 'credentials.json'),
        limits: DEFAULT_LIMITS,
        repositoryLimits: DEFAULT_REPOSITORY_LIMITS,
        allowedImages: [],
        maxBudgets: {},
        hostQueue: own,
        baseUrls: { openai: 'http://127.0.0.1:9', anthropic: 'http://127.0.0.1:9' },
        credential: () => undefined,
        promptsDir: join(stateDir, 'prompts'),
      },
    });
    const ref: RunRef = { run_id: t.ctx.runId, fixture: t.ctx.fixture, fixture_dir: LINKCHECK, backend: 'local' };
    const call = (name: 'read_file' | 'run_tests', args: object): CallView => {
      const full = { call_id: `c-${name}`, name, arguments: args };
      return { call_id: full.call_id, name, path: 'path' in args ? String(args.path) : null, ref: store.put('call', full) };
    };
    return { t, store, activities, ref, call };
  }

  it('run on the host that holds the run, and elsewhere only answer so, touching nothing', async () => {
    const { store, activities, ref, call } = hostActivities('q@host-a');
    const env = new MockActivityEnvironment();
    const read = call('read_file', { path: 'src/linkcheck.py' });
    expect(await env.run(activities.localTool, 'q@host-b', ref, read, 1000)).toEqual({ kind: 'elsewhere', host_queue: 'q@host-a' });
    const here = await env.run(activities.localTool, 'q@host-a', ref, read, 1000);
    expect(here).toMatchObject({ call_id: 'c-read_file', ok: true, error: null });
    expect(store.get<{ data: { text: string } }>((here as ResultView).ref!).data.text).toBe(SRC);

    const source = {
      kind: 'replay' as const,
      digest: store.put('replay', { schema_version: 1, decisions: [{ kind: 'plan', text: 'look first' }] }),
    };
    const input = {
      run_id: ref.run_id,
      source,
      cursor: 0,
      turn: 1,
      retry: 0,
      tools_enabled: true,
      transcript: { head: null, append: [{ message: 'steer' }] },
      facts: null,
    };
    const steerLink = sha256(canonicalJson({ prev: null, entry: { message: 'steer' } }));
    expect(await env.run(activities.localDecide, 'q@host-b', input)).toEqual({ kind: 'elsewhere', host_queue: 'q@host-a' });
    expect(store.has(steerLink)).toBe(false);
    const decided = await env.run(activities.localDecide, 'q@host-a', input);
    expect(decided).toMatchObject({ kind: 'decisions', cursor: 1, decisions: [{ kind: 'plan', text: 'look first' }] });
    expect((decided as { head: string }).head).toBe(steerLink);
    expect(store.transcript(steerLink)).toEqual([{ message: 'steer' }]);
  });

  it("run a replay's read-only call with its decision when asked, and nothing else", async () => {
    const { store, activities, ref } = hostActivities('q@host-a');
    const env = new MockActivityEnvironment();
    const tool = (call_id: string, name: string, args: object) => ({ kind: 'tool', call: { call_id, name, arguments: args } });
    const decisions = [
      tool('r-ok', 'read_file', { path: 'src/linkcheck.py' }),
      tool('r-missing', 'read_file', { path: 'src/none.py' }),
      tool('r-escape', 'read_file', { path: '../outside.py' }),
      tool('r-bad', 'read_file', { path: 7 }),
      tool('s-ok', 'search', { query: 'def ' }),
      tool('d-ok', 'show_diff', {}),
      tool('t-run', 'run_tests', {}),
      tool('p-write', 'apply_patch', { path: 'src/linkcheck.py', old: 'return 1', new: 'return 2', version: 'x' }),
      tool('n-unknown', 'rm_rf', {}),
      { kind: 'plan', text: 'then' },
    ];
    const source = { kind: 'replay' as const, digest: store.put('replay', { schema_version: 1, decisions }) };
    type Decided = { kind: string; decisions: { call: CallView | null; ran?: ResultView }[] };
    const ask = async (cursor: number, readAhead: boolean, host = 'q@host-a'): Promise<Decided> =>
      (await env.run(activities.localDecide, host, {
        run_id: ref.run_id,
        source,
        cursor,
        turn: cursor + 1,
        retry: 0,
        tools_enabled: true,
        transcript: { head: null, append: [] },
        facts: null,
        ...(readAhead ? { read_ahead: { ref, timeout_ms: 5000 } } : {}),
      })) as unknown as Decided;
    const ran = async (cursor: number) => (await ask(cursor, true)).decisions[0].ran;
    // A valid read-only call runs; its result, errors included, is the tool's own, stored whole.
    const read = (await ran(0))!;
    expect(read).toMatchObject({ call_id: 'r-ok', ok: true, error: null });
    expect(store.get<{ data: { text: string } }>(read.ref!).data.text).toBe(SRC);
    expect(await ran(1)).toMatchObject({ call_id: 'r-missing', ok: false, error: 'not_found' });
    expect(await ran(4)).toMatchObject({ call_id: 's-ok', ok: true });
    expect(await ran(5)).toMatchObject({ call_id: 'd-ok', ok: true });
    // An invalid call (a path out of the workspace, a wrong type), a test run, a write, an unknown
    // tool and a plan do not run.
    for (const cursor of [2, 3, 6, 7, 8, 9]) expect(await ran(cursor)).toBeUndefined();
    expect((await ask(2, true)).decisions[0]).toMatchObject({ call: null, invalid: { call_id: 'r-escape', ok: false } });
    // Not asked, or asked on another host: nothing runs.
    expect((await ask(0, false)).decisions[0].ran).toBeUndefined();
    expect(await ask(0, true, 'q@host-b')).toEqual({ kind: 'elsewhere', host_queue: 'q@host-a' });
  });

  it('refuse what must stay a regular activity: run_tests and a live decision', async () => {
    const { activities, ref, call } = hostActivities('q@host-a');
    const env = new MockActivityEnvironment();
    await expect(env.run(activities.localTool, 'q@host-a', ref, call('run_tests', {}), 1000)).rejects.toMatchObject({
      type: 'ProtocolError',
      nonRetryable: true,
    });
    const live = { kind: 'provider' as const, endpoint: 'e', provider: 'openai' as const, model: 'm' };
    await expect(
      env.run(activities.localDecide, 'q@host-a', {
        run_id: ref.run_id,
        source: live,
        cursor: 0,
        turn: 1,
        retry: 0,
        tools_enabled: true,
        transcript: { head: null, append: [] },
        facts: null,
      }),
    ).rejects.toMatchObject({ type: 'ProtocolError' });
  });
});

describe('capped process output', () => {
  const bytes = (...parts: (string | number[])[]) =>
    Buffer.concat(parts.map((p) => (typeof p === 'string' ? Buffer.from(p) : Buffer.from(p))));

  it('ends before a multi-byte character cut at the cap, never with a replacement character', async () => {
    // '€' is E2 82 AC; '😀' is F0 9F 98 80. Every cut inside them drops the whole character.
    for (const [text, cap, kept] of [
      ['ab€', 3, 'ab'],
      ['ab€', 4, 'ab'],
      ['ab€', 5, 'ab€'],
      ['a😀', 2, 'a'],
      ['a😀', 3, 'a'],
      ['a😀', 4, 'a'],
      ['a😀b', 5, 'a😀'],
    ] as const) {
      const out = new CappedOutput(cap);
      out.push(Buffer.from(text));
      expect({ text, cap, kept: out.text(), truncated: out.truncated }).toEqual({
        text,
        cap,
        kept,
        truncated: Buffer.byteLength(text) > cap,
      });
    }
    // A character split across chunks, then cut: still dropped whole.
    const split = new CappedOutput(4);
    for (const chunk of [bytes('ab'), bytes([0xe2]), bytes([0x82, 0xac]), bytes('tail')]) split.push(chunk);
    expect([split.text(), split.truncated]).toEqual(['ab', true]);
    // Output that was not cut is decoded as the process wrote it, even a dangling lead byte.
    const whole = new CappedOutput(10);
    whole.push(bytes('ab', [0xe2]));
    expect([whole.text(), whole.truncated]).toEqual(['ab\ufffd', false]);
  });

  it('keeps whole characters of a real process whose output the cap cuts inside one', async () => {
    const dir = tempDir('capped');
    const result = await localBackend().exec({
      argv: ['python3', '-c', 'import sys; sys.stdout.write("x" + "\u20ac" * 1000); sys.stderr.write("\u00e9" * 1000)'],
      workspaceDir: dir,
      workspaceReadOnly: false,
      outDir: dir,
      timeoutMs: 30_000,
      outputCapBytes: 101, // stdout: x + 33 euros is 100 bytes, the 34th is cut after one byte; stderr: 50 e-acutes and one byte
      signal: new AbortController().signal,
    });
    expect(result).toMatchObject({ exitCode: 0, stdoutTruncated: true, stderrTruncated: true });
    expect(result.stdout).toBe(`x${'\u20ac'.repeat(33)}`);
    expect(result.stderr).toBe('\u00e9'.repeat(50));
  });
});

describe('workspace threads', () => {
  it('keep no process alive: a process whose only work was a call in a workspace thread ends by itself, no port or thread left holding it', async () => {
    const dir = tempDir('thread-exit');
    writeFileSync(join(dir, 'a.txt'), 'a\n');
    const script = [
      `const { offThread } = require(${JSON.stringify(join(__dirname, '..', 'workspace', 'thread.js'))});`,
      `offThread('digest', [${JSON.stringify(dir)}]).then(() => setImmediate(() => process.stdout.write(JSON.stringify(process.getActiveResourcesInfo()))));`,
    ].join('\n');
    const { stdout } = await promisify(execFile)(process.execPath, ['-e', script], { timeout: 30_000 });
    // Past the call only the stdout write may be pending: no MessagePort nor Worker holds the loop.
    expect(JSON.parse(stdout)).not.toEqual(expect.arrayContaining([expect.stringMatching(/MessagePort|Worker/)]));
  });
});

describe('the undo across workspace threads', () => {
  it('goes back to the state on disk when another thread wrote down a later one than this thread remembers: a write made between two test runs stays', () => {
    const run = prepareRun({ repo: { 'a.txt': 'a\n' } });
    const { paths } = run.ctx;
    // Two threads' memories: two instances of the module, as two workspace threads hold.
    const first = require('../workspace/byproducts') as typeof import('../workspace/byproducts');
    let second!: typeof first;
    jest.isolateModules(() => {
      second = require('../workspace/byproducts') as typeof first;
    });
    // A first test run, guarded and undone on the first thread: it remembers that state.
    first.guard(paths);
    expect(first.restore(paths)).toEqual([]);
    // The run's write, then a second test run guarded on the other thread.
    writeFileSync(join(paths.workspace, 'fix.txt'), 'fixed\n');
    second.guard(paths);
    writeFileSync(join(paths.workspace, 'by-the-test.txt'), 'x\n');
    // Its restore lands on the first thread: only what the test made goes.
    expect(first.restore(paths)).toEqual(['by-the-test.txt']);
    expect(readFileSync(join(paths.workspace, 'fix.txt'), 'utf8')).toBe('fixed\n');
    run.ledger.close();
  });
});
