/**
 * The docker backend against the real engine and the sandbox image (scripts/ensure-docker.sh):
 * runs in containers give the same record as on the host, the isolation probe catches each
 * weakened setting, timeouts and floods are contained, a missing engine refuses the run, and no
 * container is left behind. Nothing here is mocked.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { connect, createServer, type Socket } from 'node:net';
import { hostname, networkInterfaces, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import Dockerode from 'dockerode';
import { DockerBackend, OWNER_LABEL, SANDBOX_ENV, type SettingsOverride } from '../sandbox/backends/docker';
import { connectTargets, probeIsolation, type IsolationReport } from '../sandbox/probe/isolation';
import type { ExecBackend, ExecSpec } from '../sandbox/backends/types';
import type { TraceEvent } from '../core/trace';
import { createSandbox, DEFAULT_SANDBOX_IMAGE } from '../worker/sandbox';
import { LINKCHECK, PROJECT_ROOT, tempDir, SETTINGS, localBackend } from './helpers/run-dir';
import { CANONICAL_RECORD, canonicalInput, runOnce, startServer, type RunOnceOptions } from './helpers/temporal';
import type { RunOutcome } from '../core/run-view';

const LABEL = 'label=coding-agent=sandbox';
/** Containers created by this process carry this owner label (other processes may share the engine). */
const OWNED = `${OWNER_LABEL}=${hostname()}:${process.pid}`;
const engine = new Dockerode();

/** Every check the probe makes; a check added or dropped must show up here. */
const CHECKS = [
  'network',
  'interfaces',
  'routes',
  'resolver',
  'host_listener',
  'write_root',
  'write_usr',
  'write_workspace_ro',
  'out_writable',
  'env_secret',
  'env_minimal',
  'docker_socket',
  'mounts',
  'pids_limit',
  'memory_limit',
  'uid',
  'no_new_privs',
  'capabilities',
  'seccomp',
].sort();

/** IPv4 addresses of this machine's interfaces, down ones included (the engine's bridge), from `ip`. */
function machineAddresses(): Map<string, string> {
  const out = execFileSync('ip', ['-o', '-4', 'addr', 'show'], { encoding: 'utf8' });
  return new Map(
    out
      .split('\n')
      .filter((l) => l.trim() !== '')
      .map((l) => {
        const [, iface, , cidr] = l.split(/\s+/);
        return [cidr.split('/')[0], iface] as [string, string];
      }),
  );
}

const failing = (r: IsolationReport | RunOutcome['state']['isolation']) =>
  Object.entries(r?.checks ?? {})
    .filter(([, c]) => !c.ok)
    .map(([name]) => name)
    .sort();

let env: TestWorkflowEnvironment;
beforeAll(async () => {
  // Fail at once, with the fix, when the engine or the image is missing: never skip silently.
  const evidence = await createSandbox({}, SETTINGS).isolation();
  if (!evidence.verified) {
    throw new Error(`docker sandbox not usable (${evidence.reason_detail ?? failing(evidence).join(', ')}); run scripts/ensure-docker.sh`);
  }
  env = await startServer();
});
afterAll(async () => {
  await env?.teardown();
});

const run = (input: object, opts?: RunOnceOptions) => runOnce(env, input, opts);

const dockerInput = (replay: string) => canonicalInput(replay, { backend: 'docker' });

/** Create/destroy events of this process's sandbox containers between two instants (ms). */
async function containerEvents(fromMs: number, toMs: number): Promise<{ action: string; id: string }[]> {
  const stream = (await engine.getEvents({
    since: Math.floor(fromMs / 1000) - 1,
    until: Math.ceil(toMs / 1000) + 1,
    filters: { type: ['container'], label: ['coding-agent=sandbox', OWNED], event: ['create', 'destroy'] },
  })) as NodeJS.ReadableStream;
  let text = '';
  for await (const chunk of stream) text += chunk.toString();
  return text
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as { Action: string; id: string; timeNano: number })
    .filter((e) => e.timeNano >= fromMs * 1e6 && e.timeNano <= toMs * 1e6)
    .map((e) => ({ action: e.Action, id: e.id }));
}

/** Ids of this process's sandbox containers seen while `running()`, polled every 100 ms. */
function watchContainers(ids: Set<string>) {
  return async (running: () => boolean) => {
    while (running()) {
      for (const c of await engine.listContainers({ all: true, filters: { label: ['coding-agent=sandbox', OWNED] } })) ids.add(c.Id);
      await new Promise((r) => setTimeout(r, 100));
    }
  };
}

async function gone(id: string): Promise<boolean> {
  try {
    await engine.getContainer(id).inspect();
    return false;
  } catch (err) {
    return (err as { statusCode?: number }).statusCode === 404;
  }
}

/**
 * `docker ps -a` of the sandbox containers this suite made, and of those nobody owns. The suite
 * makes its containers in this process (its worker runs here), so they carry its pid; every
 * container the backend makes carries an owner. A container of another process, alive or dead, is
 * not this suite's leak: suites run side by side, and another's killed worker leaves containers
 * that its next worker removes.
 */
function leftContainers(): string[] {
  const lines = execFileSync('docker', ['ps', '-a', '--filter', LABEL, '--format', `{{.ID}} {{.Label "${OWNER_LABEL}"}}`], {
    encoding: 'utf8',
  });
  return lines
    .split('\n')
    .filter(Boolean)
    .filter((line) => {
      const [, owner = ''] = line.split(' ');
      return owner === '' || owner === `${hostname()}:${process.pid}`;
    });
}

/** A small fixture folder in a temp dir, with a replay that runs the tests once and ends. */
function makeFixture(id: string, opts: { files: Record<string, string>; command: string[]; timeout_s: number }) {
  const dir = join(tempDir('fixture'), id);
  const files: Record<string, string> = {
    'fixture.json': JSON.stringify({
      schema_version: 1,
      id,
      task: 'Exercise the sandbox.',
      writable: [],
      new_files: [],
      tests: { command: opts.command, format: 'pytest', timeout_s: opts.timeout_s },
      acceptance: { command: ['python3', '{acceptance}/check.py'], timeout_s: 30 },
      budgets: { max_turns: 5, max_tool_calls: 5, deadline_s: 300, call_timeout_s: 120 },
    }),
    'acceptance/expected.json': JSON.stringify({ schema_version: 1, cases: { ran: true } }),
    'acceptance/check.py':
      'import json\nprint(json.dumps({"schema_version": 1, "cases": [{"id": "ran", "actual": True, "error": None}]}))\n',
    'replays/run-tests.json': JSON.stringify({
      schema_version: 1,
      decisions: [
        { kind: 'tool', call: { call_id: 'run', name: 'run_tests', arguments: { preset: 'candidate_tests' } } },
        { kind: 'final', text: 'done' },
      ],
    }),
    ...Object.fromEntries(Object.entries(opts.files).map(([p, t]) => [`repo/${p}`, t])),
  };
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    writeFileSync(join(dir, path), text);
  }
  return {
    dir,
    input: (backend: 'local' | 'docker') => ({
      fixture: dir,
      source: { kind: 'replay', path: join(dir, 'replays', 'run-tests.json'), trusted: true },
      backend,
      approver: 'policy:approve-writable',
    }),
  };
}

const observed = (trace: TraceEvent[], callId: string) =>
  trace.find((e) => e.type === 'tool_observed' && e.call_id === callId)?.data as {
    ok: boolean;
    error: string | null;
    data: Record<string, unknown>;
  };

describe('runs on the docker backend', () => {
  it('completes the canonical replay in containers with the same record as on the local backend', async () => {
    const local = await run(canonicalInput('canonical'));
    const started = Date.now();
    const docker = await run(dockerInput('canonical'));
    const ended = Date.now();

    expect(docker.outcome.record).toEqual(local.outcome.record);
    expect(docker.outcome.record).toEqual(CANONICAL_RECORD);
    expect(docker.receipts.map((r) => r.path)).toEqual(['tests/test_agent_nested.py', 'src/linkcheck.py']);

    // The evidence is in the state and the trace, names the image by content id, and holds no host path.
    const isolation = docker.outcome.state.isolation!;
    const imageId = execFileSync('docker', ['image', 'inspect', '-f', '{{.Id}}', DEFAULT_SANDBOX_IMAGE], { encoding: 'utf8' }).trim();
    expect(isolation).toMatchObject({ verified: true, image_id: imageId });
    expect(isolation.image_id).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(docker.trace.filter((e) => e.type === 'isolation_checked').map((e) => e.data)).toEqual([isolation]);
    // (Paths such as /tmp/pytest-of-sandbox in the output are the container's own.)
    const text = JSON.stringify(docker.outcome);
    for (const hostPath of [docker.stateDir, LINKCHECK, PROJECT_ROOT, join(tmpdir(), 'isolation-probe-')])
      expect(text).not.toContain(hostPath);

    // The base run, red run, green run, verifier tests and acceptance: five containers (the probe
    // was measured before), each created and destroyed.
    const events = await containerEvents(started, ended);
    const created = events
      .filter((e) => e.action === 'create')
      .map((e) => e.id)
      .sort();
    expect(created).toHaveLength(5);
    expect(
      events
        .filter((e) => e.action === 'destroy')
        .map((e) => e.id)
        .sort(),
    ).toEqual(created);
  });

  it('rejects the always-empty implementation by acceptance run in the container', async () => {
    const { outcome } = await run(dockerInput('always-empty'));
    expect(outcome.record).toMatchObject({
      status: 'failed',
      reason: 'verification_failed',
      candidate_tests: { discovered: 2, passed: 2, failed: 0 },
    });
    expect(outcome.record.acceptance!.failed).toContain('nested_missing');
    expect(outcome.state.verification!.acceptance!.error).toBeNull(); // judged, not a protocol error
  });
});

describe('the isolation probe against the real engine', () => {
  const backend = new DockerBackend({ image: DEFAULT_SANDBOX_IMAGE });
  const reports: Record<string, IsolationReport> = {};
  const variants: Record<string, SettingsOverride | undefined> = {
    default: undefined,
    network: { hostConfig: { NetworkMode: 'bridge' } },
    privileged_user: { user: '0:0', hostConfig: { ReadonlyRootfs: false, CapDrop: [], SecurityOpt: ['seccomp=unconfined'] } },
    no_limits_leaky: {
      env: [...SANDBOX_ENV, 'AGENT_PROBE_SECRET=planted-by-the-test'],
      hostConfig: { PidsLimit: -1, Memory: 2 * 1024 ** 3, MemorySwap: 2 * 1024 ** 3, Binds: ['/var/run/docker.sock:/var/run/docker.sock'] },
    },
  };
  beforeAll(async () => {
    for (const [name, override] of Object.entries(variants)) reports[name] = await probeIsolation(backend, { override });
  });

  it('verifies the default settings and reports every check', () => {
    expect(Object.keys(reports.default.checks).sort()).toEqual(CHECKS);
    expect(failing(reports.default)).toEqual([]);
    expect(reports.default.verified).toBe(true);
    expect(reports.default.checks.uid.detail).toBe('uid 10001 euid 10001 gid 10001 egid 10001');
  });

  it.each(CHECKS)('check %s holds in a container with the default settings', (name) => {
    expect({ name, ...reports.default.checks[name] }).toMatchObject({ name, ok: true });
  });

  it('notices the network from the interfaces, the routes, the resolver and the host listener reached through the bridge', () => {
    expect(reports.network.verified).toBe(false);
    expect(failing(reports.network)).toEqual(['host_listener', 'interfaces', 'network', 'resolver', 'routes']);
    expect(reports.network.checks.routes.detail).toMatch(/^routes beyond loopback: ipv4 0\.0\.0\.0\/0\.0\.0\.0 dev eth0/);
    expect(reports.network.checks.resolver.detail).toMatch(/routed through eth0/);
    const gateway = [...machineAddresses()].find(([, iface]) => iface === 'docker0')![0];
    expect(reports.network.checks.network.detail).toContain(`${gateway}:`);
    expect(reports.network.checks.network.detail).toMatch(new RegExp(`${gateway.replace(/\./g, '\\.')}:\\d+ connected`));
    expect(reports.default.checks.routes.detail).toMatch(/all on lo$/);
    expect(reports.default.checks.resolver.detail).toMatch(/unreachable|no nameserver/);
  });

  it('connects only to addresses of this machine: the engine bridge gateway and its own interfaces', async () => {
    const own = new Set([
      ...machineAddresses().keys(),
      ...Object.values(networkInterfaces()).flatMap((l) => (l ?? []).map((a) => a.address)),
    ]);
    const onThisMachine = (host: string) => /^127\./.test(host) || host === '::1' || own.has(host);
    const targets = await connectTargets(backend, 1);
    expect(targets.length).toBeGreaterThan(0);
    expect(targets.map(([host]) => host).filter((h) => !onThisMachine(h))).toEqual([]);
    // What the probes actually tried, as reported in their evidence.
    for (const report of Object.values(reports)) {
      const tried = report.checks.network.detail.split(', ').map((t) => t.split(':')[0]);
      expect(tried.filter((h) => !onThisMachine(h))).toEqual([]);
    }
  });

  it('notices root, a writable root file system, capabilities, new privileges and no seccomp', () => {
    expect(failing(reports.privileged_user)).toEqual(['capabilities', 'no_new_privs', 'seccomp', 'uid', 'write_root', 'write_usr']);
    expect(reports.privileged_user.checks.write_root.detail).toBe('/probe: written');
  });

  it('notices a fork loop and an allocation loop without limits, a leaked secret and the engine socket', () => {
    expect(failing(reports.no_limits_leaky)).toEqual([
      'docker_socket',
      'env_minimal',
      'env_secret',
      'memory_limit',
      'mounts',
      'pids_limit',
    ]);
    expect(reports.no_limits_leaky.checks.pids_limit.detail).toMatch(/then bound/);
    expect(reports.no_limits_leaky.checks.memory_limit.detail).toMatch(/stopped by bound/);
  });

  it('refuses the docker run of a worker whose sandbox has the network enabled, before any workspace', async () => {
    const { outcome, stateDir } = await run(dockerInput('canonical'), { docker: { override: { hostConfig: { NetworkMode: 'bridge' } } } });
    expect(outcome.record).toMatchObject({ status: 'failed', reason: 'isolation_unverified', writes: 0 });
    expect(outcome.state.detail).toMatch(/^probe checks failed: .*network/);
    expect(outcome.state.isolation).toMatchObject({ verified: false, settings: { hostConfig: { NetworkMode: 'bridge' } } });
    expect(failing(outcome.state.isolation)).toEqual(['host_listener', 'interfaces', 'network', 'resolver', 'routes']);
    expect(existsSync(join(stateDir, 'runs'))).toBe(false);
  });
});

describe('containment of candidate tests', () => {
  it('stops a test that sleeps forever at the fixture timeout and removes its container', async () => {
    const fixture = makeFixture('sleeps-forever', {
      files: { 'tests/test_forever.py': 'import time\n\ndef test_forever():\n    while True:\n        time.sleep(60)\n' },
      command: ['python3', '-m', 'pytest', '-q', '-p', 'no:cacheprovider', 'tests'],
      timeout_s: 3,
    });
    const seen = new Set<string>();
    const { trace, outcome } = await run(fixture.input('docker'), { drive: (_h, running) => watchContainers(seen)(running) });

    const result = observed(trace, 'run');
    expect(result).toMatchObject({ ok: false, error: 'tests_incomplete', data: { status: 'timeout', exit_code: null, discovered: 0 } });
    expect(outcome.record).toMatchObject({
      status: 'failed',
      reason: 'verification_failed',
      candidate_tests: { discovered: 0, passed: 0, failed: 0 },
    });
    expect(outcome.state.verification!.candidate_tests.status).toBe('timeout');
    // Two timed-out test runs (tool and verifier) and one acceptance run: each ended by its limit (status timeout).
    expect(seen.size).toBeGreaterThanOrEqual(2);
    for (const id of seen) expect(await gone(id)).toBe(true);
  });

  it('caps a test that prints megabytes and still reports exact counts, as on the local backend', async () => {
    const fixture = makeFixture('floods-output', {
      files: {
        'tests/test_flood.py': [
          'import sys',
          '',
          'def test_floods_stdout():',
          '    for _ in range(96):',
          '        sys.stdout.write("o" * 65535 + "\\n")',
          '',
          'def test_floods_stderr():',
          '    for _ in range(48):',
          '        sys.stderr.write("e" * 65535 + "\\n")',
          '',
          'def test_fails():',
          '    assert 1 == 2',
          '',
        ].join('\n'),
      },
      command: ['python3', '-m', 'pytest', '-q', '-s', '-p', 'no:cacheprovider', 'tests'],
      timeout_s: 60,
    });
    const onDocker = await run(fixture.input('docker'));
    const onHost = await run(fixture.input('local'));
    const dockerResult = observed(onDocker.trace, 'run');
    expect(dockerResult).toMatchObject({
      ok: false,
      error: 'tests_failed',
      data: { status: 'failed', exit_code: 1, discovered: 3, passed: 2, failed: 1 },
    });
    expect((dockerResult.data.failures as { test: string }[]).map((f) => f.test)).toEqual([expect.stringContaining('test_fails')]);
    expect(Buffer.byteLength(dockerResult.data.output_tail as string)).toBeLessThanOrEqual(4096);
    const { output_tail: _d, ...dockerCounts } = dockerResult.data;
    const { output_tail: _h, ...hostCounts } = observed(onHost.trace, 'run').data;
    expect(dockerCounts).toEqual(hostCounts);
    expect(onDocker.outcome.record).toEqual(onHost.outcome.record);
  });

  it('keeps a test within the workspace limit: no file grows past it in the container, the test run is refused and undone', async () => {
    const limit = 1024 * 1024;
    const fixture = makeFixture('fills-workspace', {
      files: {
        'tests/test_fill.py':
          'import time\n\ndef test_fills():\n    with open("fill.bin", "wb") as f:\n        for _ in range(64):\n            f.write(b"x" * 65536)\n    time.sleep(60)\n',
      },
      command: ['python3', '-m', 'pytest', '-q', '-p', 'no:cacheprovider', 'tests'],
      timeout_s: 120,
    });
    const { trace, outcome } = await run(fixture.input('docker'), { limits: { workspaceBytes: limit } });
    expect(outcome.state.isolation).toMatchObject({
      verified: true,
      settings: { hostConfig: { Ulimits: [{ Name: 'fsize', Soft: limit, Hard: limit }] } },
    });
    const result = observed(trace, 'run');
    expect(result).toMatchObject({
      ok: false,
      error: 'tests_incomplete',
      data: { status: 'error', unreceipted: { paths: ['fill.bin'], count: 1 } },
    });
    // The 4 MiB file stopped at the limit (RLIMIT_FSIZE): what was measured is the limit, the repository and the report.
    const measured = Number(
      /\((\d+) bytes in the workspace and its report folder, over 1048576: the workspace limit/.exec(result.data.detail as string)?.[1],
    );
    expect(measured).toBeGreaterThan(limit);
    expect(measured).toBeLessThan(limit + 64 * 1024);
    expect(outcome.record).toMatchObject({ status: 'failed', reason: 'verification_failed', diff_paths: [] });
  });

  it('keeps exactly the output cap of stdout and stderr and the exit code, as the local backend does', async () => {
    const cap = 256 * 1024;
    const script =
      'import sys\nfor _ in range(64): sys.stdout.write("o" * 65536)\nfor _ in range(48): sys.stderr.write("\\u00e9" * 32768)\nsys.exit(3)\n';
    const exec = async (backend: ExecBackend) => {
      const dir = tempDir('exec');
      mkdirSync(join(dir, 'workspace'));
      const spec: ExecSpec = {
        argv: ['python3', '-c', script],
        workspaceDir: join(dir, 'workspace'),
        workspaceReadOnly: true,
        outDir: join(dir, 'out'),
        timeoutMs: 60_000,
        outputCapBytes: cap,
        signal: new AbortController().signal,
      };
      mkdirSync(spec.outDir);
      return backend.exec(spec);
    };
    const inContainer = await exec(new DockerBackend({ image: DEFAULT_SANDBOX_IMAGE }));
    expect(inContainer).toMatchObject({ exitCode: 3, timedOut: false, cancelled: false, stdoutTruncated: true, stderrTruncated: true });
    expect(Buffer.byteLength(inContainer.stdout)).toBe(cap); // 4 MiB written
    expect(Buffer.byteLength(inContainer.stderr)).toBe(cap); // 3 MiB written, two-byte characters kept whole
    expect(inContainer.stderr).toBe('\u00e9'.repeat(cap / 2));
    expect(await exec(localBackend())).toEqual(inContainer);
  });
});

describe('without an engine', () => {
  it('ends a docker run isolation_unverified / runtime_unavailable and runs nothing on the host', async () => {
    const previous = process.env.DOCKER_HOST;
    process.env.DOCKER_HOST = 'unix:///nonexistent.sock';
    let result: Awaited<ReturnType<typeof runOnce>>;
    try {
      result = await run(dockerInput('canonical'));
    } finally {
      if (previous === undefined) delete process.env.DOCKER_HOST;
      else process.env.DOCKER_HOST = previous;
    }
    const { outcome, trace, stateDir } = result;
    expect(outcome.record).toMatchObject({
      status: 'failed',
      reason: 'isolation_unverified',
      writes: 0,
      candidate_tests: null,
      acceptance: null,
    });
    expect(outcome.state.detail).toBe('runtime_unavailable');
    expect(outcome.state.isolation).toMatchObject({ verified: false, reason_detail: 'runtime_unavailable', image_id: null, checks: {} });
    expect(trace.map((e) => e.type)).toEqual(['run_started', 'isolation_checked', 'run_finished']);
    expect(existsSync(join(stateDir, 'runs'))).toBe(false);
  });

  it('ends a docker run the same way on a worker with no docker backend at all', async () => {
    const { outcome, stateDir } = await run(dockerInput('canonical'), { docker: false });
    expect(outcome.record).toMatchObject({ status: 'failed', reason: 'isolation_unverified' });
    expect(outcome.state.detail).toBe('runtime_unavailable');
    expect(existsSync(join(stateDir, 'runs'))).toBe(false);
  });
});

describe('the worker sandbox', () => {
  it('probes again after finding no engine, and picks up an engine that answers later', async () => {
    const socketPath = join(tempDir('engine'), 'docker.sock');
    const sandbox = createSandbox({ engine: { socketPath } }, SETTINGS);
    expect(await sandbox.isolation()).toMatchObject({ verified: false, reason_detail: 'runtime_unavailable' });
    // The "engine" starts: a relay from the socket path to the real engine.
    const open = new Set<Socket>();
    const relay = createServer((client) => {
      const upstream = connect('/var/run/docker.sock');
      open.add(client).add(upstream);
      client.pipe(upstream).pipe(client);
      const close = () => (client.destroy(), upstream.destroy());
      client.on('error', close).on('close', close);
      upstream.on('error', close).on('close', close);
    });
    await new Promise<void>((resolve) => relay.listen(socketPath, resolve));
    try {
      const evidence = await sandbox.isolation();
      expect(evidence).toMatchObject({ verified: true });
      expect(await sandbox.isolation()).toBe(evidence); // a measurement is kept
    } finally {
      for (const socket of open) socket.destroy(); // idle keep-alive connections would hold close()
      await new Promise((resolve) => relay.close(resolve));
    }
  });

  it('removes containers orphaned by a dead worker process and keeps those of live ones', async () => {
    const dead = spawnSync(process.execPath, ['-e', '']).pid;
    const create = (owner: string) =>
      engine.createContainer({ Image: DEFAULT_SANDBOX_IMAGE, Cmd: ['true'], Labels: { 'coding-agent': 'sandbox', [OWNER_LABEL]: owner } });
    const orphan = await create(`${hostname()}:${dead}`);
    const ours = await create(`${hostname()}:${process.pid}`);
    const elsewhere = await create(`another-host:${dead}`);
    try {
      expect(await new DockerBackend({ image: DEFAULT_SANDBOX_IMAGE }).removeOrphans()).toBeGreaterThanOrEqual(1);
      expect(await gone(orphan.id)).toBe(true);
      expect(await gone(ours.id)).toBe(false);
      expect(await gone(elsewhere.id)).toBe(false);
    } finally {
      for (const c of [orphan, ours, elsewhere]) await c.remove({ force: true }).catch(() => undefined);
    }
  });
});

describe('after the suite', () => {
  it('leaves no sandbox container behind', async () => {
    // A probe or exec still removing its container may take a moment; anything left after that is a leak.
    const deadline = Date.now() + 15_000;
    while (leftContainers().length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 250));
    expect(leftContainers()).toEqual([]);
  });
});
