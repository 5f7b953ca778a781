/**
 * Repository runs end to end through `npm run agent` on the embedded default: a real git
 * repository made from a real project's fixture (two commits, an ignored file, an untracked
 * file, a staged change, an executable script, symlinks, a binary file), a replay run on the
 * local backend and a live run through `--provider openai` on docker, each write approved, the
 * verified change made a branch; the repository's working tree, index, HEAD and every other ref
 * unchanged byte for byte. Then refusals that change nothing, and a batch of tasks over two
 * repositories from a JSONL file.
 */
import { execFile, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { ManifestEntry } from '../workspace/workspace';
import { git, repoPicture, sampleRepo, SQLPARSE, type SampleRepo } from './helpers/git-repo';
import { ProviderServer, reply } from './helpers/provider-server';
import { freePort, LINKCHECK, PROJECT_ROOT, tempDir } from './helpers/run-dir';
import { CANONICAL_RECORD, stopEmbedded } from './helpers/temporal';

const exec = promisify(execFile);
const DOTENV = join(PROJECT_ROOT, 'fixtures', 'py-dotenv-comments');
const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const CLI = join(PROJECT_ROOT, 'dist', 'client', 'cli.js');
const SQLPARSE_TASK = JSON.parse(readFileSync(join(SQLPARSE, 'fixture.json'), 'utf8')).task as string;

type Decision = { kind: string; text?: string; call?: { call_id: string; name: string; arguments: Record<string, unknown> } };
const canonical = (fixture: string): Decision[] => JSON.parse(readFileSync(join(fixture, 'replays', 'canonical.json'), 'utf8')).decisions;

/**
 * The sqlparse fix of the fixture, plus what a run cannot do to a repository: a read through a
 * symlink that points out of the workspace (denied), and a test that makes a script executable,
 * writes a binary file and creates a symlink when it runs before the fix (the red test run; undone:
 * no receipt, so in no branch). The verifier's own run doing so would fail the verification
 * (`verification_tampered`, tests/verdict.test.ts).
 */
const FILES_TEST = [
  'import os',
  '',
  '',
  'def test_agent_files():',
  "    if 'after the *last* dot' in open('sqlparse/sql.py').read():",
  '        return',
  "    os.chmod('tools/gen.sh', 0o755)",
  "    with open('assets/generated.bin', 'wb') as f:",
  '        f.write(bytes(range(256)))',
  "    if not os.path.islink('tools/sql.link'):",
  "        os.symlink('../sqlparse/sql.py', 'tools/sql.link')",
  "    assert os.access('tools/gen.sh', os.X_OK)",
  '',
].join('\n');
function sqlparseDecisions(): Decision[] {
  const decisions = canonical(SQLPARSE);
  const at = decisions.findIndex((d) => d.call?.call_id === 'add-test') + 1;
  decisions.splice(
    at,
    0,
    { kind: 'tool', call: { call_id: 'read-outside', name: 'read_file', arguments: { path: 'tools/outside.link' } } },
    {
      kind: 'tool',
      call: {
        call_id: 'add-files-test',
        name: 'apply_patch',
        arguments: { path: 'tests/test_agent_files.py', version: 'absent', old: '', new: FILES_TEST },
      },
    },
  );
  return decisions;
}

const EXPECTED_DIFF = ['sqlparse/sql.py', 'tests/test_agent_dotted.py', 'tests/test_agent_files.py'];
/** What the files test changes when it runs before the fix, undone. */
const BY_PRODUCTS = ['assets/generated.bin', 'tools/gen.sh', 'tools/sql.link'];
const EXPECTED_RECORD = {
  fixture: 'project',
  status: 'completed',
  reason: null,
  writes: 3,
  receipts: 3,
  red_observed: true,
  diff_paths: EXPECTED_DIFF,
  candidate_tests: { discovered: 495, passed: 493, failed: 0 },
  acceptance: null,
  tool_errors: { path_denied: 1, tests_failed: 1 },
};

describe('repository runs through npm run agent', () => {
  let stateDir: string;
  let env: NodeJS.ProcessEnv;
  let sample: SampleRepo;
  /** The repository as the user left it, before any run. */
  let before: Record<string, string>;
  const branches: Record<string, string> = {};

  beforeAll(async () => {
    stateDir = tempDir('agent-repo-cli');
    env = {
      ...process.env,
      AGENT_STATE_DIR: stateDir,
      AGENT_DEV_SERVER_PORT: String(await freePort()),
      AGENT_DEV_UI_PORT: String(await freePort()),
      AGENT_TEST_REPO_KEY: 'sk-test-repo',
    };
    delete env.TEMPORAL_ADDRESS;
    sample = sampleRepo(SQLPARSE);
    before = repoPicture(sample.dir);
  });

  afterAll(() => stopEmbedded(stateDir, env.AGENT_DEV_SERVER_PORT!));

  const cli = (...args: string[]) => exec(process.execPath, [CLI, ...args], { env, cwd: PROJECT_ROOT, maxBuffer: 64 * 1024 * 1024 });
  const status = async (id: string) =>
    JSON.parse((await cli('status', id, '--json')).stdout) as {
      status: string;
      run_id: string;
      pending_approval: { action_id: string } | null;
    };
  const baseline = (runId: string) =>
    JSON.parse(readFileSync(join(stateDir, 'runs', runId, 'control', 'baseline-manifest.json'), 'utf8')) as ManifestEntry[];

  /** The branch equals the run's change: parent, paths, and the patch byte for byte. */
  async function expectBranchIsTheRun(id: string, branch: string, diffPaths: string[]) {
    const commit = git(sample.dir, 'rev-parse', branch).trim();
    expect(git(sample.dir, 'rev-parse', `${commit}^@`).trim()).toBe(sample.head); // one commit, on the base
    expect(git(sample.dir, 'diff', '--name-only', sample.head, branch).trim().split('\n')).toEqual(diffPaths);
    const patch = (await cli('patch', id)).stdout;
    expect(git(sample.dir, 'diff', '--binary', '--full-index', sample.head, branch)).toBe(patch);
    const modes = Object.fromEntries(
      git(sample.dir, 'ls-tree', '-r', branch)
        .split('\n')
        .filter(Boolean)
        .map((l) => [l.split('\t')[1], l.split(' ')[0]]),
    );
    // The test's chmod, binary file and link were undone: the branch has the base tree's modes and no new link or file.
    expect(modes).toMatchObject({ 'tools/gen.sh': '100644', 'tools/check.sh': '100755', 'tools/outside.link': '120000' });
    expect(Object.keys(modes)).not.toEqual(expect.arrayContaining(['tools/sql.link']));
    expect(Object.keys(modes)).not.toEqual(expect.arrayContaining(['assets/generated.bin']));
    branches[`ref:refs/heads/${branch}`] = commit;
    return commit;
  }

  it('runs a replay on the local backend, each write approved with `approve`, and makes the verified change a branch', async () => {
    const replay = join(tempDir('replay'), 'sqlparse-files.json');
    writeFileSync(replay, JSON.stringify({ schema_version: 1, decisions: sqlparseDecisions() }));
    const id = 'repo-local-1';
    const started = await cli(
      'run',
      sample.dir,
      '--task',
      SQLPARSE_TASK,
      '--replay',
      replay,
      '--trust-replay',
      '--trust-repository',
      '--id',
      id,
    );
    expect(started.stdout.trim()).toBe(id);
    let approved = 0;
    for (let view = await status(id); view.status !== 'completed' && view.status !== 'failed'; view = await status(id)) {
      if (view.status === 'awaiting_approval') {
        await cli('approve', id, '--principal', 'user:reviewer');
        approved++;
      } else await new Promise((r) => setTimeout(r, 300));
    }
    expect(approved).toBe(3);
    const view = await status(id);
    expect(view.status).toBe('completed');
    const trace = JSON.parse((await cli('trace', id, '--json')).stdout) as { type: string; data: any }[];
    const record = { ...EXPECTED_RECORD, replay: 'sqlparse-files' };
    const finished = trace.find((e) => e.type === 'verification_passed')!.data;
    expect({ diff_paths: finished.diff_paths, acceptance: finished.acceptance, tests: finished.candidate_tests.discovered }).toEqual({
      diff_paths: record.diff_paths,
      acceptance: null,
      tests: 495,
    });
    // The user's --trust-repository let the repository's tests run on this host; the run says so.
    expect(trace.find((e) => e.type === 'run_started')!.data).toMatchObject({ backend: 'local', trust_repository: true });
    // The red test run, after the files test was written, changed these paths: undone.
    const undone = trace.filter((e) => e.type === 'unreceipted_change').map((e) => e.data);
    expect(undone).toEqual([{ step: 'run_tests', paths: BY_PRODUCTS, count: 3 }]);
    const loaded = trace.find((e) => e.type === 'repository_loaded')!.data;
    expect(loaded).toMatchObject({
      name: 'project',
      base_commit: sample.head,
      settings_digest: null,
      tests_source: 'detected: pytest (Python test files under tests/)',
      instructions: { bytes: 83, cut: false },
    });
    expect(JSON.stringify(trace)).not.toContain(sample.dir); // no host path in the trace
    expect(trace.filter((e) => e.type === 'approval_recorded').map((e) => e.data.principal)).toEqual([
      'user:reviewer',
      'user:reviewer',
      'user:reviewer',
    ]);

    // Committed content only: ignored, untracked and staged files never reached the workspace.
    const paths = baseline(view.run_id).map((e) => e.path);
    for (const absent of ['debug.log', 'build', 'build/out.txt', 'untracked-notes.txt', 'staged-new.txt'])
      expect(paths).not.toContain(absent);
    expect(paths).toEqual(
      expect.arrayContaining(['tools/check.sh', 'tools/check.link', 'tools/outside.link', 'assets/logo.bin', 'AGENTS.md', '.gitignore']),
    );
    expect(repoPicture(sample.dir)).toEqual(before); // the run touched nothing of the repository

    const made = await cli('branch', id);
    expect(made.stdout).toMatch(new RegExp(`^branch agent/${id} at [0-9a-f]{40} \\(parent ${sample.head}\\): 3 path\\(s\\) changed`));
    const commit = await expectBranchIsTheRun(id, `agent/${id}`, EXPECTED_DIFF);
    expect(git(sample.dir, 'log', '-1', '--format=%B', commit)).toMatch(
      /^Fixed: get_real_name now anchors on the last dot[^\n]*\n\nAgent-Run: repo-local-1\nAgent-Model: replay:sqlparse-files\n/,
    );
    expect(repoPicture(sample.dir)).toEqual({ ...before, ...branches });
  });

  it('runs through --provider openai on docker, approved at the prompt, and --wait --branch makes the branch', async () => {
    const replies = sqlparseDecisions()
      .filter((d) => d.kind !== 'plan')
      .map((d) =>
        d.kind === 'tool' ? { calls: [{ id: d.call!.call_id, name: d.call!.name, arguments: d.call!.arguments }] } : { text: d.text },
      );
    const server = await new ProviderServer((_req, i) => ({ body: reply('openai', replies[i] ?? { text: 'done' }) })).start();
    try {
      const id = 'repo-live-1';
      const child = spawn(
        process.execPath,
        [
          CLI,
          'run',
          sample.dir,
          '--task',
          SQLPARSE_TASK,
          '--provider',
          'openai',
          '--model',
          'test-model',
          '--base-url',
          `${server.url}/v1`,
          '--api-key-env',
          'AGENT_TEST_REPO_KEY',
          '--backend',
          'docker',
          '--id',
          id,
          '--wait',
          '--branch',
        ],
        { env, cwd: PROJECT_ROOT },
      );
      let output = '';
      let answered = 0;
      const onData = (chunk: Buffer) => {
        output += chunk.toString();
        const asked = output.split('Approve this write? [y/N]').length - 1;
        for (; answered < asked; answered++) child.stdin.write('y\n');
      };
      child.stdout.on('data', onData);
      child.stderr.on('data', onData);
      const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
      expect({ code, answered }).toEqual({ code: 0, answered: 3 });
      expect(output).toMatch(/completed: 3 writes, 3 receipts/);
      expect(output).toMatch(new RegExp(`branch agent/${id} at [0-9a-f]{40} \\(parent ${sample.head}\\)`));
      // AGENTS.md reached the model as project instructions, in the system prompt of every request.
      const agents = git(sample.dir, 'show', `${sample.head}:AGENTS.md`);
      expect(server.requests.every((r) => r.body.messages[0].content.endsWith(agents))).toBe(true);
      const commit = await expectBranchIsTheRun(id, `agent/${id}`, EXPECTED_DIFF);
      expect(git(sample.dir, 'log', '-1', '--format=%B', commit)).toMatch(/\n\nAgent-Run: repo-live-1\nAgent-Model: test-model\n/);
      expect(repoPicture(sample.dir)).toEqual({ ...before, ...branches });
    } finally {
      await server.close();
    }
  });

  it('gives no branch of a failed run, an unknown id or an existing name, and leaves every ref as it was', async () => {
    const failed = 'repo-failed-1';
    const wrong = join(tempDir('replay'), 'no-work.json');
    const failing = { path: 'tests/test_agent_fail.py', version: 'absent', old: '', new: 'def test_fails():\n    assert False\n' };
    writeFileSync(
      wrong,
      JSON.stringify({
        schema_version: 1,
        decisions: [
          { kind: 'tool', call: { call_id: 'add', name: 'apply_patch', arguments: failing } },
          { kind: 'final', text: 'Done.' },
        ],
      }),
    );
    const run = await cli(
      'run',
      sample.dir,
      '--task',
      'Add a test.',
      '--replay',
      wrong,
      '--trust-replay',
      '--trust-repository',
      '--approver',
      'policy:approve-writable',
      '--wait',
      '--json',
      '--id',
      failed,
      '--branch',
    ).catch((e) => e);
    expect(run.code).toBe(1);
    expect(JSON.parse(run.stdout)).toMatchObject({
      trust_repository: true,
      status: 'failed',
      reason: 'verification_failed',
      writes: 1,
      candidate_tests: { failed: 1 },
    });
    const picture = repoPicture(sample.dir);
    const refusals = await Promise.all([
      cli('branch', failed).catch((e) => e),
      cli('branch', 'no-such-run').catch((e) => e),
      cli('branch', 'repo-local-1').catch((e) => e),
      cli('branch', 'repo-local-1', '--name', 'main').catch((e) => e),
      cli('branch', 'repo-local-1', '--name', 'bad..name').catch((e) => e),
      cli('patch', failed).catch((e) => e),
    ]);
    expect(refusals.map((r) => [r.code, r.stderr.trim()])).toEqual([
      [1, `${failed} ended failed (verification_failed): only a completed run's verified change becomes a branch`],
      [1, 'no run no-such-run'],
      [1, 'branch agent/repo-local-1 exists already; choose another name with --name'],
      [1, 'branch main exists already; choose another name with --name'],
      [1, '"bad..name" is not a valid branch name'],
      [1, `${failed} ended failed (verification_failed): only a completed run's verified change becomes a branch`],
    ]);
    expect(repoPicture(sample.dir)).toEqual(picture);
    expect(picture).toEqual({ ...before, ...branches });
  });

  it("evaluates a JSONL file of tasks over two repositories into the usual report, a wrong fix caught by the repository's own tests", async () => {
    const linkcheck = sampleRepo(LINKCHECK);
    const dotenv = sampleRepo(DOTENV);
    const dir = tempDir('tasks');
    // A wrong fix: the checker now reports links whose target exists; the repository's own tests catch it.
    const source = readFileSync(join(LINKCHECK, 'repo', 'src', 'linkcheck.py'));
    const wrong = [
      { kind: 'tool', call: { call_id: 'read-source', name: 'read_file', arguments: { path: 'src/linkcheck.py' } } },
      {
        kind: 'tool',
        call: {
          call_id: 'fix-source',
          name: 'apply_patch',
          arguments: {
            path: 'src/linkcheck.py',
            version: sha256(source),
            old: '            if not candidate.exists():\n',
            new: '            if candidate.exists():\n',
          },
        },
      },
      { kind: 'final', text: 'Fixed.' },
    ];
    writeFileSync(join(dir, 'inverted.json'), JSON.stringify({ schema_version: 1, decisions: wrong }));
    const fixtureOf = (f: string) => JSON.parse(readFileSync(join(f, 'fixture.json'), 'utf8'));
    const tasks = [
      {
        id: 'linkcheck-fix',
        repo: linkcheck.dir,
        base: 'main',
        task: fixtureOf(LINKCHECK).task,
        acceptance: { ...fixtureOf(LINKCHECK).acceptance, dir: join(LINKCHECK, 'acceptance') },
        replays: { canonical: join(LINKCHECK, 'replays', 'canonical.json') },
      },
      {
        id: 'linkcheck-inverted',
        repo: linkcheck.dir,
        base: linkcheck.head,
        task: fixtureOf(LINKCHECK).task,
        replays: { inverted: 'inverted.json' },
      },
      {
        id: 'dotenv-fix',
        repo: dotenv.dir,
        base: 'HEAD',
        task: fixtureOf(DOTENV).task,
        tests: fixtureOf(DOTENV).tests,
        replays: { canonical: join(DOTENV, 'replays', 'canonical.json') },
      },
    ];
    writeFileSync(join(dir, 'tasks.jsonl'), `${tasks.map((t) => JSON.stringify(t)).join('\n')}\n`);
    const pictures = [repoPicture(linkcheck.dir), repoPicture(dotenv.dir)];
    const out = join(dir, 'out');
    await cli('eval', join(dir, 'tasks.jsonl'), '--out', out, '--trust-replay', '--trust-repository', '--json');
    const report = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8'));
    expect(
      report.runs.map((r: { fixture: string; replay: string; status: string; reason: string | null }) => [
        r.fixture,
        r.replay,
        r.status,
        r.reason,
      ]),
    ).toEqual([
      ['dotenv-fix', 'canonical', 'completed', null],
      ['linkcheck-fix', 'canonical', 'completed', null],
      ['linkcheck-inverted', 'inverted', 'failed', 'verification_failed'],
    ]);
    const [dotenvRun, fixRun, inverted] = report.runs;
    // report.json leaves the trace id out (it is in timings.json and report.html).
    expect(fixRun).toEqual({ ...CANONICAL_RECORD, fixture: 'linkcheck-fix', epoch: 1, trust_repository: true, trace_id: undefined });
    expect(dotenvRun).toMatchObject({ acceptance: null, red_observed: true, candidate_tests: { failed: 0 } });
    expect(inverted).toMatchObject({
      acceptance: null,
      writes: 1,
      diff_paths: ['src/linkcheck.py'],
      candidate_tests: { discovered: 2, passed: 1, failed: 1 },
    });
    expect(report.summary).toEqual({ runs: 3, completed: 2, failed: 1 });
    for (const file of ['report.md', 'report.html', 'timings.json'])
      expect(readFileSync(join(out, file), 'utf8').length).toBeGreaterThan(0);
    expect([repoPicture(linkcheck.dir), repoPicture(dotenv.dir)]).toEqual(pictures);
  });

  it("runs the README's command on a clone of this checkout: the tree tests pass and the branch holds the new one", async () => {
    const readme = readFileSync(join(PROJECT_ROOT, 'README.md'), 'utf8');
    const section = readme.slice(readme.indexOf('## Your own repository'));
    const start = section.indexOf('```sh\n') + '```sh\n'.length;
    const command = section.slice(start, section.indexOf('\n```', start));
    expect(command).toMatch(/^npm run agent -- run \. /);
    // A clone, so the branch lands there and not in the repository these tests run from.
    const clone = join(tempDir('own-checkout'), 'coding-agent');
    git(PROJECT_ROOT, 'clone', '-q', PROJECT_ROOT, clone);
    const head = git(clone, 'rev-parse', 'HEAD').trim();
    const before = repoPicture(clone);
    const args = command.replace(/^npm run agent -- /, '').split(' ');
    const { stdout } = await exec(process.execPath, [CLI, ...args], { env, cwd: clone, maxBuffer: 16 * 1024 * 1024 });
    expect(stdout).toMatch(/\ncompleted: 1 writes, 1 receipts, diff tree-tests\/origins\.test\.js\n/);
    const branch = /branch (agent\/agent-coding-agent-[0-9a-f]{8}) at ([0-9a-f]{40}) \(parent ([0-9a-f]{40})\)/.exec(stdout)!;
    expect(branch[3]).toBe(head);
    expect(git(clone, 'diff', '--name-status', head, branch[1])).toBe('A\ttree-tests/origins.test.js\n');
    expect(repoPicture(clone)).toEqual({ ...before, [`ref:refs/heads/${branch[1]}`]: branch[2] });
  });

  it('refuses a batch whose task names no repository, no commit or a bad field, naming its line, before starting anything', async () => {
    const dir = tempDir('tasks');
    const good = {
      id: 'a',
      repo: sample.dir,
      base: 'main',
      task: 't',
      replays: { canonical: join(SQLPARSE, 'replays', 'canonical.json') },
    };
    const cases: [unknown, RegExp][] = [
      [{ ...good, base: 'no-such-ref' }, /line 2 \(task a\): unknown ref "no-such-ref": no commit of that name in /],
      [{ ...good, repo: dir }, /line 2 \(task a\): .* is not a git repository/],
      [{ ...good, tests: { command: ['go', 'test'], format: 'gotest', timeout_s: 5 } }, /line 2: tests\.format: Invalid option/],
      [{ ...good, id: 'Bad Id' }, /line 2: id: lowercase letters/],
    ];
    for (const [task, message] of cases) {
      writeFileSync(join(dir, 'tasks.jsonl'), `${JSON.stringify({ ...good, id: 'first' })}\n${JSON.stringify(task)}\n`);
      const refused = await cli('eval', join(dir, 'tasks.jsonl'), '--out', join(dir, 'out'), '--trust-repository').catch((e) => e);
      expect(refused.code).toBe(2);
      expect(refused.stderr).toMatch(message);
    }
  });
});
