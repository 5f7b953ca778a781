/**
 * Any image of the engine can be a run's (`--image`, or `image` in a repository's settings), and
 * no run proceeds on an image whose isolation is not verified. An image with no Python, built
 * here from Debian's busybox-static (docker/build-shell-image.sh, no registry pull), is verified
 * by the POSIX sh probe with the same checks as the Python probe; weakened settings are caught
 * on it; an image with neither python3 nor sh is refused naming both. A repository whose
 * settings name the busybox image completes a run on it, its tests a shell script.
 */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { DockerBackend } from '../sandbox/backends/docker';
import { probeIsolation } from '../sandbox/probe/isolation';
import { hex4, hex6Words, parseShellProbe } from '../sandbox/probe/probe-shell';
import { git, sampleRepo } from './helpers/git-repo';
import { LINKCHECK, PROJECT_ROOT } from './helpers/run-dir';
import { runOnce, startServer, writeReplay } from './helpers/temporal';
import { DEFAULT_SANDBOX_IMAGE, readSettings } from '../host/settings';

const SHELL_IMAGE = 'coding-agent-shell:1';
const NO_SHELL_IMAGE = 'coding-agent-noshell:1';

const failing = (checks: Record<string, { ok: boolean }>) =>
  Object.entries(checks)
    .filter(([, c]) => !c.ok)
    .map(([name]) => name);

describe("the shell probe's report", () => {
  it('reads /proc as the Python probe does and fails safe on what it does not say', () => {
    expect(hex4('0100007F')).toBe('127.0.0.1');
    expect(hex6Words('00000000000000000000000001000000')).toBe('0000:0000:0000:0000:0000:0000:0000:0001');
    const out = [
      '@@ missing nc',
      '@@ iface lo',
      '@@ file /proc/net/route',
      'Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT',
      'eth0\t00000000\t010011AC\t0003\t0\t0\t0\t00000000\t0\t0\t0',
      '',
      '@@ end',
      "@@ write /probe refused sh: can't create /probe: Read-only file system",
      '@@ write /out/probe written',
      '@@ file /proc/1/environ',
      'PATH=/bin\0HOME=/tmp\0',
      '@@ end',
      '@@ file /proc/self/status',
      'Uid:\t10001\t10001\t10001\t10001',
      'Gid:\t10001\t10001\t10001\t10001',
      'NoNewPrivs:\t1',
      '',
      '@@ end',
      '@@ alloc 16',
      '@@ alloc 32',
      '@@ alloc rc 137',
      '@@ forked 1',
      '@@ forked 2',
      "sh: can't fork: Resource temporarily unavailable",
      '@@ done',
    ].join('\n');
    const facts = parseShellProbe(out)!;
    expect(facts).toMatchObject({
      missing: ['nc'],
      interfaces: ['lo'],
      routes: [{ family: 'ipv4', iface: 'eth0', dest: '0.0.0.0', mask: '0.0.0.0' }],
      writes: { '/probe': 'EROFS', '/out/probe': 'written' },
      environ: { PATH: '/bin', HOME: '/tmp' },
      proc1_environ: ['PATH=/bin', 'HOME=/tmp'],
      ids: { uid: 10001, euid: 10001, gid: 10001, egid: 10001 },
      status: { NoNewPrivs: '1', CapEff: null, Seccomp: null },
      memory: { allocated: 32, outcome: 'exit:137', returncode: 137 },
      pids: { forked: 2, stopped_by: 'EAGAIN' },
    });
    expect(parseShellProbe('@@ missing\n@@ iface lo\n')).toBeNull(); // cut short: no report
    const silent = parseShellProbe('@@ missing cat nc sleep\n@@ done\n')!;
    expect(silent.ids).toEqual({ uid: 0, euid: 0, gid: 0, egid: 0, groups: [] });
    expect(silent.memory.outcome).toBe('probe_error:not_run');
  });
});

describe('an image without Python', () => {
  let env: TestWorkflowEnvironment;
  beforeAll(async () => {
    execFileSync('bash', [join(PROJECT_ROOT, 'docker', 'build-shell-image.sh')], { stdio: ['ignore', 'ignore', 'inherit'] });
    env = await startServer();
  });
  afterAll(async () => {
    await env?.teardown();
  });

  it('is verified by the POSIX sh probe, with every check of the Python probe', async () => {
    const backend = new DockerBackend({ image: SHELL_IMAGE });
    expect(() => execFileSync('docker', ['run', '--rm', '--entrypoint', 'python3', SHELL_IMAGE, '-V'], { stdio: 'ignore' })).toThrow();
    const shell = await probeIsolation(backend);
    const python = await probeIsolation(new DockerBackend({ image: 'coding-agent-sandbox:1' }));
    expect(failing(shell.checks)).toEqual([]);
    expect(shell.verified).toBe(true);
    expect(shell.checks.probe.detail).toBe('the image has no python3: the POSIX sh probe (probe.sh) ran');
    expect(
      Object.keys(shell.checks)
        .filter((k) => k !== 'probe')
        .sort(),
    ).toEqual(Object.keys(python.checks).sort());
    expect(shell.checks.pids_limit.detail).toMatch(/forks, then EAGAIN \(limit 128\)/);
    expect(shell.checks.memory_limit.detail).toMatch(/allocator stopped by exit:137/);
  });

  it.each([
    ['a bridged network', { hostConfig: { NetworkMode: 'bridge' } }, ['interfaces', 'routes']],
    ['root', { user: '0:0' }, ['uid']],
    ['all capabilities', { hostConfig: { CapDrop: [], CapAdd: ['ALL'] } }, ['capabilities']],
    [
      'an extra variable',
      { env: ['PATH=/usr/local/bin:/usr/bin:/bin', 'HOME=/tmp', 'LANG=C.UTF-8', 'PYTHONDONTWRITEBYTECODE=1', 'EXTRA_TOKEN=1'] },
      ['env_minimal'],
    ],
    ['the engine socket', { hostConfig: { Binds: ['/var/run/docker.sock:/var/run/docker.sock'] } }, ['docker_socket', 'mounts']],
  ])('catches %s with the shell probe', async (_what, override, expected) => {
    const report = await probeIsolation(new DockerBackend({ image: SHELL_IMAGE }), { override: override as never });
    expect(report.verified).toBe(false);
    expect(failing(report.checks)).toEqual(expect.arrayContaining(expected));
  });

  it('is refused, naming what is missing, when it has neither python3 nor sh; no run proceeds on it', async () => {
    const report = await probeIsolation(new DockerBackend({ image: NO_SHELL_IMAGE }));
    expect(report).toMatchObject({
      verified: false,
      checks: {
        probe: { ok: false, detail: `the image ${NO_SHELL_IMAGE} has neither python3 nor sh: the isolation probe cannot run in it` },
      },
    });

    const { dir, head } = sampleRepo(LINKCHECK);
    const replay = writeReplay([{ kind: 'final', text: 'nothing' }]);
    const { outcome, trace } = await runOnce(env, {
      repo: { path: dir, base_commit: head, task: 'fix it' },
      image: NO_SHELL_IMAGE,
      source: { kind: 'replay', path: replay, trusted: false },
      backend: 'docker',
      approver: 'policy:approve-writable',
    });
    expect(outcome.record).toMatchObject({ status: 'failed', reason: 'isolation_unverified', writes: 0, candidate_tests: null });
    expect(outcome.state.detail).toBe(
      `probe checks failed: probe (the image ${NO_SHELL_IMAGE} has neither python3 nor sh: the isolation probe cannot run in it)`,
    );
    expect(trace.map((e) => e.type)).not.toContain('model_requested');
  });

  it('runs a repository on the image its settings name (one its operator allows), its tests a shell script writing a JUnit report', async () => {
    const junit = [
      'ok=failure',
      'grep -q "^fixed$" state.txt && ok=pass',
      'if [ "$ok" = pass ]; then body=""; else body="<failure message=\\"state.txt is not fixed\\"/>"; fi',
      'printf \'<testsuite tests="1"><testcase classname="state" name="fixed">%s</testcase></testsuite>\\n\' "$body" >"$1"',
      '[ "$ok" = pass ]',
      '',
    ].join('\n');
    const settings = {
      schema_version: 1,
      tests: { command: ['sh', 'tests/run.sh', '{junit}'], format: 'junit', timeout_s: 60 },
      image: SHELL_IMAGE,
    };
    const { dir } = sampleRepo(LINKCHECK, {
      '.coding-agent.json': JSON.stringify(settings),
      'tests/run.sh': junit,
      'state.txt': 'broken\n',
    });
    const head = git(dir, 'rev-parse', 'HEAD').trim();
    const version = execFileSync('sha256sum', [join(dir, 'state.txt')])
      .toString()
      .split(' ')[0];
    const replay = writeReplay([
      { kind: 'tool', call: { call_id: 'red', name: 'run_tests', arguments: { preset: 'candidate_tests' } } },
      {
        kind: 'tool',
        call: { call_id: 'fix', name: 'apply_patch', arguments: { path: 'state.txt', version, old: 'broken\n', new: 'fixed\n' } },
      },
      { kind: 'final', text: 'Fixed the state.' },
    ]);
    const { outcome, trace } = await runOnce(
      env,
      {
        repo: { path: dir, base_commit: head, task: 'fix the state' },
        source: { kind: 'replay', path: replay, trusted: false },
        backend: 'docker',
        approver: 'policy:approve-writable',
      },
      { settings: readSettings({ ...process.env, AGENT_ALLOWED_IMAGES: `${DEFAULT_SANDBOX_IMAGE},${SHELL_IMAGE}` }) },
    );
    expect(outcome.record).toMatchObject({
      fixture: 'project',
      status: 'completed',
      writes: 1,
      red_observed: true,
      diff_paths: ['state.txt'],
      candidate_tests: { discovered: 1, passed: 1, failed: 0 },
      acceptance: null,
    });
    expect(trace.find((e) => e.type === 'repository_loaded')!.data).toMatchObject({ image: SHELL_IMAGE, tests_source: 'settings' });
    expect(outcome.state.isolation).toMatchObject({ verified: true, checks: { probe: { ok: true } } });
  });
});
