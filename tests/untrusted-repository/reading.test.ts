/**
 * The import boundary (docs/security.md): a repository the user has not trusted on the local
 * backend is read only by git in a container, every cost its content controls is bounded before
 * the work, and none of it runs on the worker's event loop. Each attack against a real repository,
 * a real Docker engine, the real command line and one real worker process, which completes a
 * canonical run while it meets the attack. Its event loop's largest stall meanwhile (its gauge
 * `agent_event_loop_delay_max_seconds`, read every 250 ms) is printed beside an idle process's:
 * a figure, not a bound, since it depends on the machine's load; the bound is the bench's
 * (`npm run bench`, the import section: a 200,000-path refusal, an import, 100,000 files undone).
 */
import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import Dockerode from 'dockerode';
import { startRunWithArgs } from '../../client/run-access';
import type { RunInput, ToolResult } from '../../core/contracts';
import type { RunOutcome } from '../../core/run-view';
import { DEFAULT_REPOSITORY_LIMITS, hostGit } from '../../workspace/git';
import { readSettings } from '../../host/settings';
import { sandboxGit } from '../../sandbox/git-sandbox';
import { git, sampleRepo } from '../helpers/git-repo';
import { manyPathsCommit } from '../../scripts/support/git';
import { freePort, LINKCHECK, PROJECT_ROOT, tempDir } from '../helpers/run-dir';
import { canonicalInput, killed, spawnWorker, startServer, traceIn, uniqueQueue, writeReplay } from '../helpers/temporal';

const exec = promisify(execFile);
const CLI = join(PROJECT_ROOT, 'dist', 'client', 'cli.js');
const REPLAY = join(LINKCHECK, 'replays', 'canonical.json');
const FINAL = writeReplay([{ kind: 'final', text: 'Nothing to change.' }]);
const settings = readSettings();
const docker = new Dockerode();

let env: TestWorkflowEnvironment;
let worker: ChildProcess;
let metrics: string;
let stateDir: string;
const taskQueue = uniqueQueue('reading');

beforeAll(async () => {
  env = await startServer();
  stateDir = tempDir('reading-state');
  metrics = `127.0.0.1:${await freePort()}`;
  worker = spawnWorker(env, taskQueue, stateDir, { AGENT_METRICS_ADDRESS: metrics });
  // The process's first run loads what every later one shares: measured stalls are of the attacks.
  await runOnWorker(canonicalInput('canonical'));
}, 180_000);

afterAll(async () => {
  worker?.kill('SIGTERM');
  if (worker) await killed(worker);
  await env?.teardown();
}, 60_000);

/** The worker's largest event-loop delay (ms) while `during` runs, from its per-second gauge. */
async function largestStall(during: Promise<unknown>): Promise<number> {
  let largest = 0;
  let running = true;
  const sample = async () => {
    const text = await (await fetch(`http://${metrics}/metrics`)).text();
    const line = text.split('\n').find((l) => l.startsWith('agent_event_loop_delay_max_seconds'));
    if (line) largest = Math.max(largest, Number(line.split(' ').at(-1)) * 1000);
  };
  const sampling = (async () => {
    while (running) {
      await sample();
      await new Promise((r) => setTimeout(r, 250));
    }
  })();
  await during.catch(() => undefined);
  // The gauge shows a second's largest delay once that second is over.
  await new Promise((r) => setTimeout(r, 1500));
  running = false;
  await sampling;
  return largest;
}

/** `npm run agent -- <args>` on a fresh embedded default, stopped after 60 s: exit code and stderr lines. */
async function agent(...args: string[]): Promise<{ code: number; lines: string[] }> {
  const childEnv: NodeJS.ProcessEnv = {
    ...process.env,
    AGENT_STATE_DIR: tempDir('agent-refused'),
    AGENT_DEV_SERVER_PORT: String(await freePort()),
    AGENT_DEV_UI_PORT: String(await freePort()),
  };
  delete childEnv.TEMPORAL_ADDRESS;
  const ended = await exec(process.execPath, [CLI, ...args], { env: childEnv, cwd: PROJECT_ROOT, timeout: 60_000 }).then(
    () => ({ code: 0, stderr: '' }),
    (e: { code: number; stderr: string }) => e,
  );
  return { code: ended.code, lines: ended.stderr.split('\n').filter(Boolean) };
}

/** The command line's own check of `dir` in the sandbox (docker) and, trusted, on this machine. */
const check = (dir: string, ...flags: string[]) =>
  agent('run', dir, '--task', 'fix it', '--replay', REPLAY, '--trust-replay', ...(flags.length ? flags : ['--backend', 'docker']));

async function runOnWorker(input: RunInput): Promise<{ outcome: RunOutcome; runId: string }> {
  const handle = await startRunWithArgs(env.client, [input], { taskQueue, workflowId: `${uniqueQueue('attack')}-run` });
  const outcome = (await handle.result()) as RunOutcome;
  return { outcome, runId: handle.firstExecutionRunId };
}

function repoInput(dir: string, replay = FINAL, backend: RunInput['backend'] = 'docker'): RunInput {
  return {
    repo: {
      path: dir,
      base_commit: git(dir, 'rev-parse', 'HEAD').trim(),
      task: 'Fix it.',
      ...(backend === 'local' ? { trusted: true } : {}),
    },
    source: { kind: 'replay', path: replay, trusted: true },
    backend,
    approver: 'policy:approve-writable',
  };
}

/**
 * An idle process's largest event-loop delay (ms) while `during` runs: how long this machine,
 * loaded by whatever else runs, keeps a process that has nothing to do from its next turn.
 */
async function machineDelay(during: Promise<unknown>): Promise<number> {
  const probe = spawn(
    process.execPath,
    [
      '-e',
      "const h = require('node:perf_hooks').monitorEventLoopDelay({ resolution: 10 }); h.enable();" +
        "process.stdin.resume(); process.stdin.on('end', () => { h.disable(); process.stdout.write(String(h.max / 1e6)); });",
    ],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  let out = '';
  probe.stdout!.on('data', (d) => (out += d));
  const exited = new Promise((resolve) => probe.on('exit', resolve));
  await during.catch(() => undefined);
  probe.stdin!.end();
  await exited;
  return Number(out);
}

/**
 * Runs `attack` while the worker completes a canonical run: the attack's value and the canonical
 * run's record. The worker's largest event-loop stall over both is printed beside an idle
 * process's largest delay in the same window (what the machine's load adds to any process).
 */
async function meanwhile<T>(attack: () => Promise<T>): Promise<{ value: T; canonical: RunOutcome['record'] }> {
  const both = Promise.all([runOnWorker(canonicalInput('canonical')), attack()]);
  const [largest, machine] = await Promise.all([largestStall(both), machineDelay(both)]);
  console.log(
    `largest event-loop stall ${largest.toFixed(0)} ms, an idle process's ${machine.toFixed(0)} ms: ${expect.getState().currentTestName}`,
  );
  const [canonical, value] = await both;
  return { value, canonical: canonical.outcome.record };
}

const COMPLETED = { status: 'completed', writes: 2, receipts: 2 };

/**
 * `dir` refused with `refusal` by the command line's check (reading in the container) and by the
 * worker, which completes a canonical run meanwhile.
 */
async function refusedMeanwhile(dir: string, refusal: string): Promise<void> {
  const { value, canonical } = await meanwhile(async () => ({
    sandboxed: await check(dir),
    worker: (await runOnWorker(repoInput(dir))).outcome,
  }));
  expect([value.sandboxed.code, value.sandboxed.lines]).toEqual([2, [refusal]]);
  expect(value.worker.state.detail).toBe(refusal);
  expect(canonical).toMatchObject(COMPLETED);
}

/** A repository whose base tree lacks one of its blobs, configured as a partial clone of `remote`. */
function partialClone(remote: Record<string, string>): { dir: string; missing: string } {
  const { dir } = sampleRepo(LINKCHECK, { 'data/lazy.txt': 'fetched on demand\n' });
  const missing = git(dir, 'rev-parse', 'HEAD:data/lazy.txt').trim();
  unlinkSync(join(dir, '.git', 'objects', missing.slice(0, 2), missing.slice(2)));
  git(dir, 'config', 'core.repositoryformatversion', '1');
  git(dir, 'config', 'extensions.partialClone', 'origin');
  git(dir, 'config', 'remote.origin.promisor', 'true');
  // Set already, so a lazy fetch has nothing to write first: it goes straight to the transport.
  git(dir, 'config', 'remote.origin.partialclonefilter', 'blob:none');
  for (const [key, value] of Object.entries(remote)) git(dir, 'config', key, value);
  return { dir, missing };
}

describe('a repository that makes git run a command', () => {
  const marks = tempDir('marks');
  const extRemote = (mark: string) => ({
    'remote.origin.url': `ext::sh -c mkdir% -p% ${mark}% &&% touch% ${mark}/ran`,
    'protocol.ext.allow': 'always',
  });
  const uploadPackRemote = (mark: string) => ({
    'remote.origin.url': sampleRepo(LINKCHECK).dir,
    'remote.origin.uploadpack': `mkdir -p ${mark} && touch ${mark}/ran && git-upload-pack`,
    'protocol.file.allow': 'always',
  });

  it.each([
    ['a promisor remote with protocol.ext.allow', extRemote],
    ['a local promisor remote with its own uploadpack', uploadPackRemote],
  ])(
    '(%s, reached through a missing base blob) is refused, and nothing runs on this machine',
    async (_what, remote) => {
      const mark = join(marks, `${Math.random().toString(36).slice(2)}`);
      const { dir } = partialClone(remote(mark));
      const refusal =
        'the repository is a partial clone (extensions.partialclone): reading it would fetch from a remote, which is never done here; give a complete clone';
      const { value, canonical } = await meanwhile(async () => ({
        sandboxed: await check(dir),
        trusted: await check(dir, '--trust-repository'),
        worker: (await runOnWorker(repoInput(dir))).outcome,
      }));
      expect([value.sandboxed.code, value.sandboxed.lines]).toEqual([2, [refusal]]);
      expect([value.trusted.code, value.trusted.lines]).toEqual([2, [refusal]]);
      expect(value.worker.record).toMatchObject({ status: 'failed', reason: 'invalid_input' });
      expect(value.worker.state.detail).toBe(refusal);
      expect(existsSync(mark)).toBe(false);
      expect(canonical).toMatchObject(COMPLETED);
    },
    180_000,
  );

  it.each([
    ['ext', extRemote],
    ['file', uploadPackRemote],
  ])(
    "behind the refusal, its %s fetch runs in the reading container only, and the machine's git makes none",
    async (protocol, remote) => {
      const mark = join(marks, `${Math.random().toString(36).slice(2)}`);
      const { dir, missing } = partialClone(remote(mark));
      // The container's wall alone, the hardened environment's lowered on purpose (a protocol
      // allowed, lazy fetching on): the command runs, in there.
      const sandboxed = await sandboxGit(docker, { image: settings.gitImage, hostPath: dir, limits: DEFAULT_REPOSITORY_LIMITS });
      try {
        const read = sandboxed.git(['cat-file', '-t', missing], {
          env: { GIT_DIR: '/repo/.git', GIT_ALLOW_PROTOCOL: protocol, GIT_NO_LAZY_FETCH: '0' },
        });
        await read.catch(() => undefined);
        // The marker exists in the container's throwaway /tmp (git can hash it there)...
        const inside = await sandboxed.git(['hash-object', `${mark}/ran`]);
        expect(inside.toString().trim()).toMatch(/^[0-9a-f]{40}$/);
      } finally {
        await sandboxed.close();
      }
      // ...and not on this machine.
      expect(existsSync(mark)).toBe(false);
      // The machine's git, in the hardened environment, fetches nothing: no transport at all.
      const machine = hostGit(dir, { path: process.env.PATH!, idleMs: 5000, totalMs: 30_000 });
      await expect(machine.git(['cat-file', '-t', missing], { env: { GIT_DIR: join(dir, '.git') } })).rejects.toThrow(
        /git cat-file failed/,
      );
      await machine.close();
      expect(existsSync(mark)).toBe(false);
    },
    120_000,
  );
});

describe('a repository whose reading would stall or grow without end', () => {
  it('(a config include that is a FIFO) is refused when git has said nothing for the idle limit, on either side', async () => {
    const { dir } = sampleRepo(LINKCHECK);
    const input = repoInput(dir);
    execFileSync('mkfifo', [join(dir, '.git', 'stall')]);
    git(dir, 'config', 'include.path', 'stall'); // from now on, every git command on it blocks opening the FIFO
    const { value, canonical } = await meanwhile(async () => ({
      sandboxed: await check(dir),
      trusted: await check(dir, '--trust-repository'),
      worker: (await runOnWorker(input)).outcome,
    }));
    const stalled = `${dir}: git rev-parse read nothing for 5 s (AGENT_REPOSITORY_LIMITS.idle_s): something in the repository's git folder stalls a read (a FIFO, say)`;
    expect(value.sandboxed.lines).toEqual([stalled]);
    expect(value.trusted.lines).toEqual([stalled]);
    // The message names the limit that ended each: the idle one (5 s), not a reading's whole time
    // (600 s); how long the command took besides is the machine's (a container to start, under load).
    expect([value.sandboxed.code, value.trusted.code]).toEqual([2, 2]);
    expect(value.worker.record).toMatchObject({ status: 'failed', reason: 'invalid_input' });
    expect(value.worker.state.detail).toBe(stalled);
    expect(canonical).toMatchObject(COMPLETED);
  }, 180_000);

  it('(one blob under 200,000 paths) is refused past the files limit while the listing streams', async () => {
    const { dir } = sampleRepo(LINKCHECK);
    git(dir, 'update-ref', 'HEAD', manyPathsCommit(dir, 'HEAD', 200, 1000));
    await refusedMeanwhile(dir, 'too_large: the base tree has more than 100000 files (AGENT_REPOSITORY_LIMITS.files)');
  }, 180_000);

  it('(a 1 GiB file of zeros) is refused by its size in the listing, before a byte of it is read', async () => {
    const { dir } = sampleRepo(LINKCHECK);
    const big = execFileSync('sh', ['-c', 'head -c 1073741824 /dev/zero | git hash-object -w --stdin'], { cwd: dir }).toString().trim();
    git(dir, 'update-index', '--add', '--cacheinfo', `100644,${big},data/zeros.bin`);
    git(dir, 'commit', '-q', '-m', 'a gigabyte of zeros');
    await refusedMeanwhile(
      dir,
      'too_large: "data/zeros.bin" in the base tree has 1073741824 bytes, over 104857600 (AGENT_REPOSITORY_LIMITS.blob_bytes)',
    );
  }, 180_000);

  it('(a test that leaves 400,000 files) is stopped past the new-files limit and undone, off the event loop', async () => {
    const { dir } = sampleRepo(LINKCHECK, {
      '.coding-agent.json': JSON.stringify({
        schema_version: 1,
        tests: {
          command: ['python3', '-m', 'pytest', '-q', '-p', 'no:cacheprovider', 'tests/test_many.py'],
          format: 'pytest',
          timeout_s: 600,
        },
      }),
      'tests/test_many.py': [
        'import os',
        '',
        'def test_many():',
        "    os.makedirs('many', exist_ok=True)",
        '    for i in range(400_000):',
        "        open(f'many/{i}', 'w').close()",
        '',
      ].join('\n'),
    });
    const { value, canonical } = await meanwhile(() => runOnWorker(repoInput(dir)));
    expect(value.outcome.record).toMatchObject({ status: 'failed', reason: 'verification_failed', writes: 0 });
    expect(value.outcome.state.verification!.candidate_tests.error).toMatch(
      /^too_large: the process left more than 50000 new files and folders in the workspace and its report folder \(\d+ counted; AGENT_REPOSITORY_LIMITS\.new_files\): it was stopped and its changes undone$/,
    );
    // Undone: the workspace holds the base tree again.
    expect(existsSync(join(stateDir, 'runs', value.runId, 'workspace', 'many'))).toBe(false);
    expect(canonical).toMatchObject(COMPLETED);
  }, 300_000);
});

describe('what a repository may name', () => {
  it('(an image the operator built for something else) is refused before a container of it is made, unless the user names it', async () => {
    const image = 'coding-agent-sandbox-pip:1';
    const { dir } = sampleRepo(LINKCHECK, { '.coding-agent.json': JSON.stringify({ schema_version: 1, image }) });
    const since = Math.floor(Date.now() / 1000);
    const { value, canonical } = await meanwhile(async () => ({
      cli: await check(dir),
      worker: (await runOnWorker(repoInput(dir))).outcome,
    }));
    const refusal = `the repository's settings name the image ${image}, which is not one the operator allows repositories to name (AGENT_ALLOWED_IMAGES): ask the operator to list it, or give an image yourself with --image`;
    expect([value.cli.code, value.cli.lines]).toEqual([2, [refusal]]);
    expect(value.worker.state.detail).toBe(refusal);
    const events = await new Promise<string>((resolve, reject) => {
      const until = Math.floor(Date.now() / 1000) + 1;
      void docker.getEvents({ since, until, filters: { type: ['container'], event: ['create'], image: [image] } }).then((stream) => {
        let text = '';
        stream.on('data', (c: Buffer) => (text += c.toString()));
        stream.on('end', () => resolve(text));
        stream.on('error', reject);
      }, reject);
    });
    expect(events).toBe('');
    expect(canonical).toMatchObject(COMPLETED);
  }, 180_000);

  it('(a write to a protected path under another case, form or name) is denied, never put to the approver', async () => {
    const { dir } = sampleRepo(LINKCHECK);
    const paths = [
      '.GitHub/workflows/x.yml',
      '.Husky/pre-commit',
      '.GITATTRIBUTES',
      '.NPMRC',
      '.yarnrc.yml',
      '.cargo/config.toml',
      'gradlew',
      '.mvn/wrapper/x',
      '.vscode/tasks.json',
      '.github./workflows/y.yml',
    ];
    const replay = writeReplay([
      ...paths.map((path, i) => ({
        kind: 'tool',
        call: { call_id: `w${i}`, name: 'apply_patch', arguments: { path, version: 'absent', old: '', new: 'x\n' } },
      })),
      { kind: 'final', text: 'Done.' },
    ]);
    const { value, canonical } = await meanwhile(() => runOnWorker(repoInput(dir, replay, 'local')));
    const results = traceIn(stateDir, value.runId)
      .filter((e) => e.type === 'tool_observed')
      .map((e) => e.data as ToolResult);
    // A trailing dot is no path a tool takes at all; every other name is the protected file's.
    expect(results.map((r) => [r.call_id, r.error])).toEqual(
      paths.map((p, i) => [`w${i}`, p.includes('./') ? 'path_denied' : 'write_denied']),
    );
    expect(value.outcome.record).toMatchObject({ writes: 0, receipts: 0 });
    expect(canonical).toMatchObject(COMPLETED);
    expect(readdirSync(dir)).not.toContain('.NPMRC');
  }, 180_000);
});
