/**
 * What a test process leaves behind is untrusted: its changes to the workspace are undone before
 * the next step (a source file rewritten, a file added, an executable bit, a link, a FIFO, a
 * folder turned into a link to a host folder), a worker killed while the tests ran has them undone
 * by the next attempt, and a report in `/out` that is a FIFO or a link to `/dev/zero` is a clear
 * error on both backends while the same worker goes on serving another run. Real processes, a
 * real dev server and the real engine.
 */
import { spawn } from 'node:child_process';
import { chmodSync, cpSync, existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { Client, type WorkflowHandle } from '@temporalio/client';
import { connectClient } from '../../host/connection';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { preparePatch, writePatch } from '../../tools/apply_patch';
import { runTests } from '../../tools/run_tests';
import { sha256 } from '../../host/digest';
import type { Fixture, RunInput } from '../../core/contracts';
import { createWorker } from '../../worker';
import { branchFromRun, patchFromRun } from '../../client/branch';
import { queryState, runHandle, sendApproval, startRunWithArgs } from '../../client/run-access';
import type { Session } from '../../client/session';
import { readSettings } from '../../host/settings';
import { startDevServer } from '../../host/temporal-server';
import { collectHistories } from '../../scripts/support/histories';
import { readWorkerRecord, stopWorker } from '../../host/background-worker';
import { storedTrace } from '../../store/stored-trace';
import { git, sampleRepo } from '../helpers/git-repo';
import { freePort, LINKCHECK, PROJECT_ROOT, prepareRun, tempDir, type TestRun, SETTINGS } from '../helpers/run-dir';
import { CANONICAL_RECORD, canonicalInput, runOnce, startServer, uniqueQueue, waitFor, writeReplay } from '../helpers/temporal';
import type { RunOutcome } from '../../core/run-view';
import { temporalBinary } from '../../host/temporal-bin';
import { hostPath } from '../../host/tools-env';

const junit = (command: string[]): Partial<Fixture> => ({
  tests: { command, format: 'junit', timeout_s: 60 },
  writable: ['src/app.py'],
  new_files: [],
});

/** A repository with something of every kind a test may change. */
const REPO = {
  'src/app.py': 'print("app")\n',
  'src/util.py': 'X = 1\n',
  'tools/run.sh': '#!/bin/sh\necho run\n',
  'data/table.csv': 'a,b\n1,2\n',
  'docs/readme.md': '# readme\n',
};

/** A test command (Python) that changes the workspace every way it can, then writes a passing report. */
const VANDAL = [
  'import os, shutil, sys',
  "open('src/app.py', 'w').write('print(\"rewritten by a test\")\\n')",
  "open('new_file.txt', 'w').write('made by a test\\n')",
  "os.chmod('tools/run.sh', 0o755)",
  "os.symlink('/etc/passwd', 'passwd.link')",
  "os.mkfifo('left.fifo')",
  "os.remove('docs/readme.md')",
  "os.makedirs('build/out')",
  "open('build/out/x.o', 'wb').write(bytes(range(256)))",
  // A folder turned into a link to a host folder: undoing it must never write through the link.
  "shutil.rmtree('data')",
  "os.symlink(sys.argv[2], 'data')",
  'open(sys.argv[1], \'w\').write(\'<testsuite><testcase classname="t" name="ok"/></testsuite>\')',
].join('\n');

const VANDALISED = [
  'build',
  'build/out',
  'build/out/x.o',
  'data',
  'data/table.csv',
  'docs/readme.md',
  'left.fifo',
  'new_file.txt',
  'passwd.link',
  'src/app.py',
  'tools/run.sh',
];

/** A host folder a test links the workspace to, and what it holds. */
function hostFolder(): { dir: string; picture: () => string[] } {
  const dir = tempDir('host-folder');
  writeFileSync(join(dir, 'table.csv'), 'host data\n');
  return { dir, picture: () => readdirSync(dir).map((n) => `${n}:${readFileSync(join(dir, n), 'utf8')}`) };
}

/** Writes `src/app.py` through apply_patch, receipted in the ledger, as an approved write would. */
async function receiptedWrite(t: TestRun): Promise<string> {
  const version = sha256(readFileSync(join(t.workspace, 'src/app.py')));
  const args = { path: 'src/app.py', version, old: 'print("app")', new: 'print("approved")' };
  const prepared = await preparePatch(t.ctx, 'fix', args);
  if (prepared.kind !== 'prepared') throw new Error(`not prepared: ${JSON.stringify(prepared)}`);
  expect(await writePatch(t.ctx, prepared.action, args)).toEqual({ kind: 'written', recovered: false });
  return readFileSync(join(t.workspace, 'src/app.py'), 'utf8');
}

describe('a test process changing the workspace', () => {
  it('has every change undone (a rewrite, a new file, a chmod, a link, a FIFO, a folder made a link), receipted writes kept and nothing written through the link', async () => {
    const host = hostFolder();
    const hostBefore = host.picture();
    const t = prepareRun({
      repo: { ...REPO, 'tests/vandal.py': VANDAL },
      fixture: junit(['python3', 'tests/vandal.py', '{junit}', host.dir]),
    });
    const approved = await receiptedWrite(t);
    const before = t.digest();

    const result = await runTests(t.ctx, 'vandal');
    expect(result).toMatchObject({ ok: true, data: { status: 'passed', discovered: 1 } });
    expect((result.data as { unreceipted: unknown }).unreceipted).toEqual({ paths: VANDALISED, count: VANDALISED.length });
    expect(t.digest()).toBe(before);
    expect(readFileSync(join(t.workspace, 'src/app.py'), 'utf8')).toBe(approved);
    expect(lstatSync(join(t.workspace, 'data')).isDirectory()).toBe(true);
    expect(readFileSync(join(t.workspace, 'data/table.csv'), 'utf8')).toBe('a,b\n1,2\n');
    expect((lstatSync(join(t.workspace, 'tools/run.sh')).mode & 0o111) === 0).toBe(true);
    for (const gone of ['new_file.txt', 'passwd.link', 'left.fifo', 'build']) expect(existsSync(join(t.workspace, gone))).toBe(false);
    expect(host.picture()).toEqual(hostBefore);
    // Nothing is left for a later step to undo again.
    expect(existsSync(join(t.ctx.paths.control, 'undo.json'))).toBe(false);
  });

  it('reports no change when the tests change nothing', async () => {
    const t = prepareRun({
      repo: {
        ...REPO,
        'tests/quiet.py': 'import sys\nopen(sys.argv[1], \'w\').write(\'<testsuite><testcase classname="t" name="ok"/></testsuite>\')\n',
      },
      fixture: junit(['python3', 'tests/quiet.py', '{junit}']),
    });
    await receiptedWrite(t);
    const result = await runTests(t.ctx, 'quiet');
    expect(result).toMatchObject({ ok: true, data: { status: 'passed' } });
    expect(result.data).not.toHaveProperty('unreceipted');
  });

  it('undoes what a test changed before its worker was killed, at the next test run, and reports it there', async () => {
    const marker = join(tempDir('killed'), 'changed');
    const t = prepareRun({
      repo: {
        ...REPO,
        // Changes the workspace, says so, then waits to be killed with its worker.
        'tests/slow.py': `import os, sys, time\nopen('src/app.py', 'w').write('half done\\n')\nos.makedirs('junk')\nopen(${JSON.stringify(marker)}, 'w').write('x')\ntime.sleep(300)\n`,
        'tests/quiet.py': 'import sys\nopen(sys.argv[1], \'w\').write(\'<testsuite><testcase classname="t" name="ok"/></testsuite>\')\n',
      },
      fixture: junit(['python3', 'tests/slow.py', '{junit}']),
    });
    const approved = await receiptedWrite(t);
    const before = t.digest();
    // A worker process of its own, running the same run's tests, SIGKILLed while they run.
    const worker = spawn(
      process.execPath,
      [
        '-e',
        `const { runCandidateTests } = require(${JSON.stringify(join(PROJECT_ROOT, 'dist/sandbox/test-runner.js'))});
         const { LocalBackend } = require(${JSON.stringify(join(PROJECT_ROOT, 'dist/sandbox/backends/local.js'))});
         const { DEFAULT_LIMITS } = require(${JSON.stringify(join(PROJECT_ROOT, 'dist/core/limits.js'))});
         runCandidateTests({ backend: new LocalBackend({ path: ${JSON.stringify(hostPath(SETTINGS))} }), fixture: ${JSON.stringify({ tests: t.ctx.fixture.tests })},
           paths: ${JSON.stringify(t.ctx.paths)}, limits: DEFAULT_LIMITS, timeoutMs: 600000, signal: new AbortController().signal });`,
      ],
      { stdio: 'ignore' },
    );
    await waitFor('the test to change the workspace', async () => existsSync(marker));
    worker.kill('SIGKILL');
    await new Promise((r) => worker.once('exit', r));
    expect(t.digest()).not.toBe(before);
    expect(existsSync(join(t.ctx.paths.control, 'undo.json'))).toBe(true);

    // The next attempt: its own tests change nothing; the killed attempt's changes are undone and reported.
    t.ctx.fixture = { ...t.ctx.fixture, tests: { command: ['python3', 'tests/quiet.py', '{junit}'], format: 'junit', timeout_s: 60 } };
    const result = await runTests(t.ctx, 'after-kill');
    expect(result).toMatchObject({ ok: true, data: { status: 'passed', unreceipted: { paths: ['junk', 'src/app.py'], count: 2 } } });
    expect(t.digest()).toBe(before);
    expect(readFileSync(join(t.workspace, 'src/app.py'), 'utf8')).toBe(approved);
  });
});

/** The linkcheck fixture with its test command replaced by `command` (junit format). */
function fixtureWithTests(command: string[]): string {
  const dir = join(tempDir('hostile-report'), 'fixture');
  cpSync(LINKCHECK, dir, { recursive: true });
  const spec = JSON.parse(readFileSync(join(dir, 'fixture.json'), 'utf8')) as Record<string, unknown>;
  writeFileSync(join(dir, 'fixture.json'), JSON.stringify({ ...spec, tests: { command, format: 'junit', timeout_s: 60 } }));
  return dir;
}

describe('a report in /out that is a FIFO or a link to /dev/zero', () => {
  let env: TestWorkflowEnvironment;
  beforeAll(async () => {
    env = await startServer();
  });
  afterAll(async () => {
    await env?.teardown();
  });

  const hostile = {
    fifo: {
      command: ['sh', '-c', 'mkfifo "$0"', '{junit}'],
      detail: 'the test report <out>/junit.xml is a FIFO, not a regular file; it was not read',
    },
    zero: {
      command: ['ln', '-s', '/dev/zero', '{junit}'],
      detail: 'the test report <out>/junit.xml is a symbolic link, not followed; it was not read',
    },
  };

  for (const backend of ['local', 'docker'] as const) {
    it(`is a clear error on the ${backend} backend, while the same worker completes another run`, async () => {
      const stateDir = tempDir('agent-state');
      const taskQueue = uniqueQueue('hostile-report');
      const { worker, store, close } = await createWorker({ connection: env.nativeConnection, taskQueue, stateDir });
      const replay = writeReplay([
        { kind: 'tool', call: { call_id: 'tests', name: 'run_tests', arguments: { preset: 'candidate_tests' } } },
        { kind: 'final', text: 'done' },
      ]);
      const inputs: Record<string, RunInput> = {
        fifo: {
          ...canonicalInput('canonical', { backend }),
          fixture: fixtureWithTests(hostile.fifo.command),
          source: { kind: 'replay', path: replay, trusted: true },
        },
        zero: {
          ...canonicalInput('canonical', { backend }),
          fixture: fixtureWithTests(hostile.zero.command),
          source: { kind: 'replay', path: replay, trusted: true },
        },
        canonical: canonicalInput('canonical', { backend }),
      };
      try {
        const outcomes = await worker.runUntil(() =>
          Promise.all(
            Object.entries(inputs).map(async ([name, input]) => {
              const handle = await startRunWithArgs(env.client, [input], { taskQueue, workflowId: `${taskQueue}-${name}` });
              const outcome = (await handle.result()) as RunOutcome;
              return [name, { outcome, trace: storedTrace(store, handle.firstExecutionRunId, true) }] as const;
            }),
          ),
        );
        const by = Object.fromEntries(outcomes);
        expect(by.canonical.outcome.record).toEqual({ ...CANONICAL_RECORD });
        for (const name of ['fifo', 'zero'] as const) {
          const { outcome, trace } = by[name];
          const observed = trace.find((e) => e.type === 'tool_observed' && e.call_id === 'tests')!.data;
          expect(observed).toMatchObject({ ok: false, error: 'tests_incomplete', data: { status: 'error', detail: hostile[name].detail } });
          expect(outcome.record).toMatchObject({ status: 'failed', reason: 'verification_failed', writes: 0, unreceipted_changes: 0 });
          expect(outcome.state.verification!.candidate_tests).toMatchObject({ status: 'error', error: hostile[name].detail });
        }
      } finally {
        close();
      }
    });
  }
});

/** A script that records each time git runs it: `mark.sh <what>` appends `<what>` to the marker file. */
function markerScript(): { script: string; marker: string; marks: () => string[] } {
  const dir = tempDir('git-marker');
  const marker = join(dir, 'marker');
  const script = join(dir, 'mark.sh');
  writeFileSync(script, `#!/bin/sh\necho "$1" >> ${JSON.stringify(marker)}\nexit 1\n`);
  chmodSync(script, 0o755);
  return { script, marker, marks: () => (existsSync(marker) ? readFileSync(marker, 'utf8').trim().split('\n') : []) };
}

/**
 * A committed test that rewrites a source file and adds one when it runs before the fix is there
 * (the run's red test run). Run by the verifier, the same would fail the verification
 * (`verification_tampered`, tests/verdict.test.ts); here it shows that what the loop's runs change
 * never reaches a branch.
 */
const REWRITING_TEST = [
  'def test_rewrites_the_source():',
  "    if 'document.parent / target' in open('src/linkcheck.py').read():",
  '        return',
  "    with open('src/linkcheck.py', 'a') as f:",
  "        f.write('\\n# appended by a test\\n')",
  "    open('stray.txt', 'w').write('left by a test')",
  '',
].join('\n');

describe('a repository run whose repository and user configure commands, and whose test rewrites a source file', () => {
  let env: TestWorkflowEnvironment;
  beforeAll(async () => {
    env = await startServer();
  });
  afterAll(async () => {
    await env?.teardown();
  });

  it('imports, branches and patches with no configured command run, an unsigned commit, and only the receipted paths', async () => {
    const mark = markerScript();
    const sample = sampleRepo(LINKCHECK, { '.gitattributes': '* filter=mark diff=mark\n', 'tests/test_rewrites.py': REWRITING_TEST });
    const hooks = join(tempDir('hooks'), 'hooks');
    mkdirSync(hooks);
    for (const hook of ['reference-transaction', 'post-commit', 'pre-commit', 'post-index-change']) {
      writeFileSync(join(hooks, hook), `#!/bin/sh\n${mark.script} hook-${hook}\n`);
      chmodSync(join(hooks, hook), 0o755);
    }
    const configure = (file: string, entries: [string, string][]) => {
      for (const [key, value] of entries) git(sample.dir, 'config', '--file', file, key, value);
    };
    // The repository's own configuration: ssh signing through a key command, hooks, fsmonitor, filters, text conversion...
    configure(join(sample.dir, '.git', 'config'), [
      ['commit.gpgSign', 'true'],
      ['tag.gpgSign', 'true'],
      ['gpg.format', 'ssh'],
      ['gpg.ssh.defaultKeyCommand', `${mark.script} ssh-key-command`],
      ['gpg.ssh.program', `${mark.script} ssh-program`],
      ['user.signingKey', 'key::ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB7n6KZwW2bSWZ9SpV1Qz4oQf5gXo1lG6bKJx8sQ8u3y test'],
      ['core.hooksPath', hooks],
      ['core.fsmonitor', `${mark.script} fsmonitor`],
      ['core.sshCommand', `${mark.script} ssh-command`],
      ['core.pager', `${mark.script} pager`],
      ['core.editor', `${mark.script} editor`],
      ['credential.helper', `!${mark.script} credential`],
      ['filter.mark.clean', `${mark.script} filter-clean`],
      ['filter.mark.smudge', `${mark.script} filter-smudge`],
      ['filter.mark.process', `${mark.script} filter-process`],
      ['diff.mark.textconv', `${mark.script} textconv`],
      ['diff.external', `${mark.script} external-diff`],
    ]);
    // ...and the user's own: openpgp signing through a program of theirs.
    const home = tempDir('git-home');
    configure(join(home, '.gitconfig'), [
      ['commit.gpgSign', 'true'],
      ['gpg.program', `${mark.script} gpg-program`],
      ['user.signingKey', 'ABCDEF0123456789'],
    ]);
    const savedHome = process.env.HOME;
    process.env.HOME = home;
    try {
      const { outcome, trace, handle, stateDir } = await runOnce(
        env,
        {
          repo: { path: sample.dir, base_commit: sample.head, task: 'Fix it.' },
          source: { kind: 'replay', path: join(LINKCHECK, 'replays', 'canonical.json'), trusted: true },
          backend: 'docker',
          approver: 'policy:approve-writable',
        },
        { workflowId: `${uniqueQueue('repo')}-run` },
      );
      expect(outcome.record).toMatchObject({
        status: 'completed',
        writes: 2,
        receipts: 2,
        diff_paths: ['src/linkcheck.py', 'tests/test_agent_nested.py'],
      });
      // The red test run rewrote the source and added a file; undone.
      const undone = trace.filter((e) => e.type === 'unreceipted_change').map((e) => e.data);
      expect(undone).toEqual([{ step: 'run_tests', paths: ['src/linkcheck.py', 'stray.txt'], count: 2 }]);
      expect(outcome.record.unreceipted_changes).toBe(1);
      expect(mark.marks()).toEqual([]); // the workspace's import ran nothing

      const session = { settings: { ...readSettings(), stateDir }, client: env.client } as unknown as Session;
      const made = await branchFromRun(session, handle.workflowId);
      const patch = await patchFromRun(session, handle.workflowId);
      expect(mark.marks()).toEqual([]);
      expect(made.paths).toEqual(['src/linkcheck.py', 'tests/test_agent_nested.py']);
      expect(git(sample.dir, 'diff', '--name-only', sample.head, made.branch).trim().split('\n')).toEqual(made.paths);
      expect(git(sample.dir, 'show', `${made.branch}:src/linkcheck.py`)).not.toContain('appended by a test');
      expect(git(sample.dir, 'cat-file', 'commit', made.commit)).not.toMatch(/^gpgsig/m);
      expect(patch).not.toContain('appended by a test');
      expect(patch).not.toContain('stray.txt');
    } finally {
      process.env.HOME = savedHome;
    }
  });
});

/**
 * A TCP relay on a port of its own to a dev server: the command line reaches the server only
 * through it, and `cut()` refuses every connection for a while, as an overloaded server would.
 */
class Relay {
  private server: Server | null = null;
  private readonly sockets = new Set<Socket>();
  constructor(
    readonly port: number,
    private readonly target: number,
  ) {}

  async open(): Promise<void> {
    this.server = createServer((client) => {
      const upstream = connect(this.target, '127.0.0.1');
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on('close', () => this.sockets.delete(s));
        s.on('error', () => undefined);
      }
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((resolve) => this.server!.listen(this.port, '127.0.0.1', resolve));
  }

  /** Resets every connection and refuses new ones for `ms`. */
  async cut(ms: number): Promise<void> {
    await new Promise<void>((resolve) => {
      this.server!.close(() => resolve());
      for (const s of this.sockets) s.resetAndDestroy();
    });
    await new Promise((r) => setTimeout(r, ms));
    await this.open();
  }

  close(): void {
    this.server?.close();
    for (const s of this.sockets) s.destroy();
  }
}

describe('run --wait --json while the SDK core warns', () => {
  it('prints exactly one JSON document on stdout, the warning on stderr without colour codes', async () => {
    const stateDir = tempDir('agent-core-warns');
    const server = await startDevServer({
      temporal: temporalBinary(SETTINGS),
      stateDir: tempDir('temporal'),
      port: await freePort(),
      uiPort: null,
      dbFile: null,
      attached: true,
    });
    const relay = new Relay(await freePort(), Number(server.address.split(':')[1]));
    await relay.open();
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      AGENT_STATE_DIR: stateDir,
      AGENT_DEV_SERVER_PORT: String(relay.port),
      AGENT_DEV_UI_PORT: String(await freePort()),
    };
    delete env.TEMPORAL_ADDRESS;
    // A test that takes long enough for the connection to be cut while the command follows the run.
    const fixture = fixtureWithTests([
      'python3',
      '-c',
      'import sys, time; time.sleep(12); open(sys.argv[1], "w").write("<testsuite><testcase classname=\\"t\\" name=\\"ok\\"/></testsuite>")',
      '{junit}',
    ]);
    const replay = writeReplay([
      { kind: 'tool', call: { call_id: 'slow-tests', name: 'run_tests', arguments: { preset: 'candidate_tests' } } },
      { kind: 'final', text: 'done' },
    ]);
    const id = `core-warns-${process.pid}`;
    try {
      const command = spawn(
        process.execPath,
        [
          join(PROJECT_ROOT, 'dist', 'client', 'cli.js'),
          'run',
          fixture,
          '--replay',
          replay,
          '--trust-replay',
          '--approver',
          'policy:approve-writable',
          '--wait',
          '--json',
          '--id',
          id,
        ],
        { env, cwd: PROJECT_ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
      );
      let stdout = '';
      let stderr = '';
      command.stdout.on('data', (c: Buffer) => (stdout += c.toString('utf8')));
      command.stderr.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
      const exited = new Promise<number | null>((resolve) => command.once('exit', (code) => resolve(code)));
      // Once the tests run, the relay goes away long enough for the core to retry its calls many times.
      const client = new Client({ connection: await connectClient({ address: server.address }) });
      await waitFor('the run to start its tests', async () => {
        const view = await queryState(runHandle(client, id));
        return view.counters.tool_calls > 0;
      });
      await relay.cut(5000);
      const code = await exited;
      await client.connection.close();

      expect(stderr).toMatch(/gRPC call \w+ retried \d+ times/);
      expect(stderr).not.toMatch(/\u001b\[/); // no colour codes
      expect(stdout).not.toMatch(/retried|WARN/);
      const record = JSON.parse(stdout) as { status: string; unreceipted_changes: number };
      expect(record).toMatchObject({ status: 'failed', reason: 'verification_failed', unreceipted_changes: 0 });
      expect(code).toBe(1);
    } finally {
      const worker = readWorkerRecord(stateDir);
      if (worker) await stopWorker(worker);
      relay.close();
      await collectHistories(server.address);
      server.stop();
      await server.exited;
    }
  });
});

/**
 * Rewrites a source file and leaves a file behind at every test session before any test runs, as
 * long as neither task's fix is there (each task's red test run): a verification's run doing the
 * same would fail it (`verification_tampered`).
 */
const REWRITING_CONFTEST = [
  'import pathlib',
  '',
  '',
  'def pytest_sessionstart(session):',
  "    source = pathlib.Path('src/mathx.py')",
  "    if 'return high' in source.read_text() or 'for w in words' in pathlib.Path('src/strx.py').read_text():",
  '        return',
  "    source.write_text(source.read_text() + '\\n# appended by a test\\n')",
  "    pathlib.Path('stray.txt').write_text('left by a test')",
  '',
].join('\n');

describe('a sub-run whose tests rewrite a source file and leave a file', () => {
  let env: TestWorkflowEnvironment;
  beforeAll(async () => {
    env = await startServer();
  });
  afterAll(async () => {
    await env?.teardown();
  });

  it('merges only the receipted writes of its tasks into the orchestrating run, which completes', async () => {
    const fixture = join(tempDir('two-modules'), 'fixture');
    cpSync(join(PROJECT_ROOT, 'fixtures', 'py-two-modules'), fixture, { recursive: true });
    writeFileSync(join(fixture, 'repo', 'tests', 'conftest.py'), REWRITING_CONFTEST);
    /** Approves every pending write of the run and of its tasks until it ends. */
    const approveTree = async (parent: WorkflowHandle, running: () => boolean) => {
      const done = new Set<string>();
      while (running()) {
        const view = await queryState(parent).catch(() => null);
        for (const h of [parent, ...(view?.subruns?.tasks ?? []).map((t) => parent.client.getHandle(t.task_id))]) {
          const p = await queryState(h)
            .then((v) => (v.status === 'awaiting_approval' ? v.pending_approval : null))
            .catch(() => null);
          if (!p || done.has(p.action_id)) continue;
          done.add(p.action_id);
          await sendApproval(h, {
            action_id: p.action_id,
            decision: 'approve',
            args_digest: p.args_digest,
            workspace_digest: p.workspace_digest,
          });
        }
        await new Promise((r) => setTimeout(r, 150));
      }
    };
    const { outcome, trace, stateDir } = await runOnce(
      env,
      {
        fixture,
        source: { kind: 'replay', path: join(fixture, 'replays', 'canonical.json'), trusted: true },
        backend: 'local',
        approver: 'interactive',
      },
      { drive: approveTree },
    );
    expect(outcome.record).toMatchObject({
      status: 'completed',
      diff_paths: ['src/mathx.py', 'src/strx.py', 'tests/test_agent_clamp.py', 'tests/test_agent_title.py'],
      subruns: { merges: 2 },
    });
    const merged = trace
      .filter((e) => e.type === 'approval_requested')
      .map((e) => (e.data as { diff: string }).diff)
      .join('\n');
    expect(merged).not.toContain('stray.txt');
    expect(merged).not.toContain('appended by a test');
    expect(readFileSync(join(stateDir, 'runs', outcome.state.run_id, 'workspace', 'src', 'mathx.py'), 'utf8')).not.toContain(
      'appended by a test',
    );
    // Each task's red test run rewrote the source and left the file: undone in its run.
    expect(trace.filter((e) => e.type === 'unreceipted_change')).toEqual([]);
    for (const task of outcome.state.subruns!.tasks) {
      const child = (await runHandle(env.client, task.task_id).result()) as RunOutcome;
      expect(child.record.unreceipted_changes).toBe(1);
      expect(child.record.diff_paths).not.toContain('stray.txt');
    }
  });
});
