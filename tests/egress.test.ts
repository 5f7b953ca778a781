/**
 * The setup phase and its egress proxy (SPEC section 11), on the real engine, with squid in its
 * own container. Upstream hosts are servers of this test on this machine; the proxy resolves
 * their test names from the hosts file the worker's settings name (AGENT_EGRESS_HOSTS), and
 * nothing else resolves anything. This machine's bridge address is one the proxy refuses unless
 * the operator opens it, so the worker's settings open it (AGENT_EGRESS_OPEN_CIDRS), as an
 * operator opens the range of a private registry (tests/untrusted-repository/egress.test.ts shows it
 * refused when not opened).
 */
import { execFile, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { cpSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { hostname, networkInterfaces } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { promisify } from 'node:util';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import Dockerode from 'dockerode';
import tar from 'tar-stream';
import { DockerBackend } from '../sandbox/backends/docker';
import { placeholder, SETUP_CA_DIR } from '../sandbox/setup';
import type { RunInput } from '../core/contracts';
import type { TraceEvent } from '../core/trace';
import { readSettings } from '../host/settings';
import { startRunWithArgs } from '../client/run-access';
import { listSetupImages, type CachedSetup } from '../sandbox/setup/cache';
import {
  allowingPip,
  BLOCKED_HOST,
  bridgeGateway,
  buildWheel,
  credentialsFile,
  finalOnlyReplay,
  hostsFile,
  INDEX_HOST,
  packageIndex,
  plainServer,
  pythonRepo,
  testCertificates,
  type Upstream,
} from './helpers/egress';
import { fragments, historyJson, leaks } from './helpers/leaks';
import { LINKCHECK, PROJECT_ROOT, tempDir } from './helpers/run-dir';
import { CANONICAL_RECORD, canonicalInput, killed, runOnce, spawnWorker, startServer, uniqueQueue } from './helpers/temporal';
import type { RunOutcome } from '../core/run-view';

jest.setTimeout(240_000);

let env: TestWorkflowEnvironment;
let gateway: string;
let hosts: string;
let index: Upstream;
let blocked: Upstream;
const wheel = buildWheel('greetlib', '1.0', 'def greet(name):\n    return "hello " + name\n');
const replay = finalOnlyReplay();

beforeAll(async () => {
  env = await startServer();
  gateway = await bridgeGateway();
  hosts = hostsFile(gateway);
  index = await packageIndex([{ name: 'greetlib', ...wheel }]);
  blocked = await plainServer();
});

afterAll(async () => {
  await index?.close();
  await blocked?.close();
  await env?.teardown();
  // The cache images of this file's runs (their allow lists name the test's hosts only).
  const docker = new Dockerode();
  for (const image of await listSetupImages(docker)) {
    if (image.allow.includes(INDEX_HOST))
      await docker
        .getImage(image.image_id)
        .remove()
        .catch(() => undefined);
  }
});

const settings = () => ({
  ...readSettings(),
  ...allowingPip(readSettings().allowedImages),
  egressHostsFile: hosts,
  egressOpenCidrs: [`${gateway}/32`],
});

/** The archive of an image's newest layer (`docker save`), as bytes: what its commit added. */
async function topLayer(image: string): Promise<Buffer> {
  const saved = (await new Dockerode().getImage(image).get()) as unknown as Readable;
  const files = new Map<string, Buffer>();
  await new Promise<void>((resolve, reject) => {
    const extract = tar.extract();
    extract.on('entry', (header, stream, next) => {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        files.set(header.name, Buffer.concat(chunks));
        next();
      });
    });
    extract.on('finish', resolve);
    extract.on('error', reject);
    saved.pipe(extract);
  });
  const manifest = JSON.parse(files.get('manifest.json')!.toString('utf8')) as { Layers: string[] }[];
  return files.get(manifest[0].Layers.at(-1)!)!;
}

/** Everything of an image's file system, as one archive's bytes. */
async function imageBytes(image: string): Promise<Buffer> {
  const docker = new Dockerode();
  const container = await docker.createContainer({ Image: image, Cmd: ['/'], HostConfig: { NetworkMode: 'none' } });
  try {
    const chunks: Buffer[] = [];
    const stream = (await container.export()) as unknown as Readable;
    for await (const chunk of stream) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks);
  } finally {
    await container.remove({ force: true });
  }
}

function repoInput(repo: { dir: string; head: string }): RunInput {
  return {
    repo: { path: repo.dir, base_commit: repo.head, task: 'Make the tests pass.' },
    source: { kind: 'replay', path: replay, trusted: true },
    backend: 'docker',
    approver: 'policy:approve-writable',
  };
}

const pipInstall = (port: number) => [
  'pip',
  'install',
  '--no-cache-dir',
  '--break-system-packages',
  '--disable-pip-version-check',
  '--index-url',
  `http://${INDEX_HOST}:${port}/simple/`,
  '--trusted-host',
  INDEX_HOST,
  'greetlib',
];
const ofType = (trace: TraceEvent[], type: string) => trace.filter((e) => e.type === type);
const python = (code: string) => ['python3', '-c', code];
const setupFinished = (trace: TraceEvent[]) =>
  ofType(trace, 'setup_finished')[0].data as { ok: boolean; key: string; cached?: boolean; image_id?: string; detail?: string };
const cli = (...args: string[]) => promisify(execFile)(process.execPath, [join(PROJECT_ROOT, 'dist', 'client', 'cli.js'), ...args]);
/** The first run's repository: the cache test runs it again with the same inputs. */
let installRepo: { dir: string; head: string };
let installKey: string;

describe('a setup phase behind the egress proxy', () => {
  it('installs a package only the local index has, through the proxy: the run completes with egress allowed > 0 and denied = 0', async () => {
    const repo = (installRepo = pythonRepo({
      setup: { commands: [pipInstall(index.port)], timeout_s: 120 },
      egress: { allow: [INDEX_HOST] },
    }));
    const before = index.requests.length;
    const { outcome, trace } = await runOnce(env, repoInput(repo), { settings: settings() });
    expect(outcome.record).toMatchObject({ status: 'completed', reason: null, candidate_tests: { discovered: 1, passed: 1, failed: 0 } });
    expect(outcome.record.egress!.allowed).toBeGreaterThan(0);
    expect(outcome.record.egress!.denied).toBe(0);
    const allowed = ofType(trace, 'egress_allowed').map((e) => e.data as { host: string; port: number; method: string; bytes: number });
    expect(allowed.length).toBe(outcome.record.egress!.allowed);
    expect(allowed.every((e) => e.host === INDEX_HOST && e.port === index.port && e.method === 'GET' && e.bytes > 0)).toBe(true);
    expect(index.requests.slice(before).map((r) => r.url)).toEqual(['/simple/greetlib/', `/files/${wheel.file.split('/').pop()}`]);
    const isolation = ofType(trace, 'isolation_checked').map(
      (e) => e.data as { phase?: string; verified: boolean; checks: Record<string, { ok: boolean }> },
    );
    expect(isolation.map((i) => [i.phase ?? 'before_setup', i.verified])).toEqual([
      ['before_setup', true],
      ['setup', true],
      ['after_setup', true],
    ]);
    expect(ofType(trace, 'setup_command').map((e) => e.data)).toEqual([{ argv: pipInstall(index.port), exit_code: 0, timed_out: false }]);
    expect(setupFinished(trace)).toMatchObject({ ok: true, cached: false });
    installKey = setupFinished(trace).key;
    // The cache image is marked as one: the base image's build inputs do not carry over to it, so
    // the image scripts never take it for the base (docker/build-image.sh finds images by them).
    const labels = (await new Dockerode().getImage(`coding-agent-setup:${installKey}`).inspect()).Config.Labels;
    expect(labels).toMatchObject({ 'coding-agent': 'setup', 'coding-agent.inputs': `setup:${installKey}` });
  });

  it('refuses a host the allow list leaves out and a method it does not allow: egress_denied names each, and the run ends setup_failed', async () => {
    const script = [
      'import sys, urllib.request, urllib.error',
      'def go(url, data=None):',
      '    try:',
      '        urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=10)',
      '        return 200',
      '    except urllib.error.HTTPError as e:',
      '        print(url, e.code)',
      '        return e.code',
      `go("http://${INDEX_HOST}:${index.port}/simple/greetlib/", data=b"upload")`,
      `sys.exit(1 if go("http://${BLOCKED_HOST}:${blocked.port}/exfiltrate") == 403 else 0)`,
    ].join('\n');
    const repo = pythonRepo({ setup: { commands: [python(script)], timeout_s: 60 }, egress: { allow: [INDEX_HOST] } });
    const before = index.requests.length;
    const { outcome, trace } = await runOnce(env, repoInput(repo), { settings: settings() });
    expect(outcome.record).toMatchObject({
      status: 'failed',
      reason: 'setup_failed',
      egress: { allowed: 0, denied: 2 },
      candidate_tests: null,
    });
    expect(ofType(trace, 'egress_denied').map((e) => e.data)).toEqual([
      { host: INDEX_HOST, port: index.port, method: 'POST', bytes: expect.any(Number), status: 403, reason: 'method not allowed' },
      {
        host: BLOCKED_HOST,
        port: blocked.port,
        method: 'GET',
        bytes: expect.any(Number),
        status: 403,
        reason: 'host not in the allow list',
      },
    ]);
    expect(ofType(trace, 'egress_allowed')).toEqual([]);
    expect(blocked.requests).toEqual([]);
    expect(index.requests.length).toBe(before);
    expect(outcome.state.detail).toMatch(/^setup command "python3 -c .*" exited 1: .*exfiltrate 403/s);
    expect(ofType(trace, 'setup_command').map((e) => (e.data as { exit_code: number }).exit_code)).toEqual([1]);
    expect(ofType(trace, 'run_finished')[0].data).toMatchObject({ status: 'failed', reason: 'setup_failed' });
  });

  it('keeps a setup command from reaching the host directly: its connections fail, the host listener accepts none, and the setup-phase probe says so', async () => {
    const listener = createServer((socket) => {
      accepted++;
      socket.destroy();
    });
    let accepted = 0;
    await new Promise<void>((r) => listener.listen(0, '0.0.0.0', () => r()));
    const port = (listener.address() as { port: number }).port;
    const addresses = [
      gateway,
      ...Object.values(networkInterfaces()).flatMap((l) =>
        (l ?? []).filter((a) => a.family === 'IPv4' && !a.internal).map((a) => a.address),
      ),
    ];
    const script = [
      'import socket, sys',
      'reached = 0',
      `for host in ${JSON.stringify([...new Set(addresses)])}:`,
      '    try:',
      `        socket.create_connection((host, ${port}), timeout=3).close()`,
      '        reached += 1',
      '        print(host, "connected")',
      '    except OSError as e:',
      '        print(host, type(e).__name__, e)',
      'sys.exit(0 if reached else 1)',
    ].join('\n');
    try {
      const repo = pythonRepo({ setup: { commands: [python(script)], timeout_s: 60 }, egress: { allow: [INDEX_HOST] } });
      const { outcome, trace } = await runOnce(env, repoInput(repo), { settings: settings() });
      expect(outcome.record).toMatchObject({ status: 'failed', reason: 'setup_failed', egress: { allowed: 0, denied: 0 } });
      expect(accepted).toBe(0);
      const command = ofType(trace, 'setup_command')[0].data as { exit_code: number; output_tail: string };
      expect(command.exit_code).toBe(1);
      for (const host of new Set(addresses))
        expect(command.output_tail).toMatch(
          new RegExp(`^${host.replace(/\./g, '\\.')} (TimeoutError|OSError|ConnectionRefusedError)`, 'm'),
        );
      expect(command.output_tail).not.toMatch(/connected/);
      const probe = ofType(trace, 'isolation_checked')
        .map((e) => e.data as { phase?: string; verified: boolean; checks: Record<string, { ok: boolean; detail: string }> })
        .find((e) => e.phase === 'setup')!;
      expect(probe.verified).toBe(true);
      expect(probe.checks.proxy).toMatchObject({ ok: true, detail: expect.stringMatching(/:3128 connected$/) });
      expect(probe.checks.host_listener).toEqual({ ok: true, detail: '0 connection(s) accepted by the host listener' });
      // The engine bridge's gateway, the host's interfaces and the internal network's gateway address, none reached.
      const tried = probe.checks.network.detail.split(', ');
      expect(tried.length).toBeGreaterThanOrEqual(3);
      expect(tried.filter((t) => / (connected|ECONNREFUSED)$/.test(t))).toEqual([]);
      expect(probe.checks.network.detail).toContain(`${gateway}:`);
    } finally {
      listener.close();
    }
  });

  it('makes every request an event, past the first page the setup result carries', async () => {
    const loop = python(
      `import urllib.request\nfor i in range(130):\n    urllib.request.urlopen("http://${INDEX_HOST}:${index.port}/simple/greetlib/", timeout=10).read()`,
    );
    const repo = pythonRepo({ setup: { commands: [loop, pipInstall(index.port)], timeout_s: 120 }, egress: { allow: [INDEX_HOST] } });
    const { outcome, trace } = await runOnce(env, repoInput(repo), { settings: settings() });
    expect(outcome.record).toMatchObject({ status: 'completed', egress: { allowed: 132, denied: 0 } });
    expect(ofType(trace, 'egress_allowed')).toHaveLength(132);
    expect(setupFinished(trace)).toMatchObject({ allowed: 132, denied: 0, omitted: 0 });
  });

  it('starts a second run with the same inputs from the cached image: setup_cached, no setup command, no request', async () => {
    const before = index.requests.length;
    const { outcome, trace } = await runOnce(env, repoInput(installRepo), { settings: settings() });
    expect(outcome.record).toMatchObject({
      status: 'completed',
      egress: { allowed: 0, denied: 0 },
      candidate_tests: { discovered: 1, passed: 1, failed: 0 },
    });
    expect(ofType(trace, 'setup_cached').map((e) => (e.data as { key: string }).key)).toEqual([installKey]);
    expect(ofType(trace, 'setup_command')).toEqual([]);
    expect([...ofType(trace, 'egress_allowed'), ...ofType(trace, 'egress_denied')]).toEqual([]);
    expect(index.requests.length).toBe(before);
    expect(setupFinished(trace)).toMatchObject({ ok: true, cached: true, key: installKey });
    // Only the run's image is probed: the setup phase ran nothing.
    expect(ofType(trace, 'isolation_checked').map((e) => (e.data as { phase?: string }).phase ?? 'before_setup')).toEqual([
      'before_setup',
      'after_setup',
    ]);
  });

  it('writes what the setup left in /workspace into the workspace as its baseline: the tests import it, the diff does not show it', async () => {
    const generate = python(
      'import os\nos.makedirs("gen", exist_ok=True)\nopen("gen/values.py", "w").write("ANSWER = 42\\n")\nopen("gen/__init__.py", "w").close()',
    );
    const repo = pythonRepo(
      { setup: { commands: [pipInstall(index.port), generate], timeout_s: 120 }, egress: { allow: [INDEX_HOST] } },
      { 'tests/test_generated.py': 'from gen.values import ANSWER\n\n\ndef test_answer():\n    assert ANSWER == 42\n' },
    );
    const { outcome, trace, stateDir, runId } = await runOnce(env, repoInput(repo), { settings: settings() });
    expect(outcome.record).toMatchObject({ status: 'completed', diff_paths: [], candidate_tests: { discovered: 2, passed: 2, failed: 0 } });
    expect(setupFinished(trace)).toMatchObject({ ok: true, added: 2 });
    expect(readFileSync(join(stateDir, 'runs', runId, 'workspace', 'gen', 'values.py'), 'utf8')).toBe('ANSWER = 42\n');
  });

  it('refuses a setup that changes a file of the base tree, removes one, or leaves a .git folder, naming the path (three runs at once)', async () => {
    const cases: [string, RegExp][] = [
      ['open("greeter.py", "a").write("# touched\\n")', /the setup changed greeter\.py, a file of the base tree/],
      ['import os\nos.remove("tests/test_greeter.py")', /the setup removed tests\/test_greeter\.py/],
      ['import os\nos.makedirs("vendor/.git")', /vendor\/\.git.*a \.git segment/],
    ];
    const outcomes = await Promise.all(
      cases.map(async ([code]) => {
        const repo = pythonRepo({ setup: { commands: [python(code)], timeout_s: 60 } });
        return (await runOnce(env, repoInput(repo), { settings: settings() })).outcome;
      }),
    );
    for (const [i, outcome] of outcomes.entries()) {
      // Nothing of a refused setup stays in the workspace.
      expect(outcome.record).toMatchObject({ status: 'failed', reason: 'setup_failed', egress: { allowed: 0, denied: 0 }, diff_paths: [] });
      expect(outcome.state.detail).toMatch(cases[i][1]);
    }
  });

  it('ends infrastructure_error naming the script to run when the proxy image is missing, with nothing left behind', async () => {
    const repo = pythonRepo({ setup: { commands: [pipInstall(index.port)], timeout_s: 60 }, egress: { allow: [INDEX_HOST] } });
    const { outcome } = await runOnce(env, repoInput(repo), { settings: { ...settings(), proxyImage: 'coding-agent-proxy:no-such-tag' } });
    expect(outcome.record).toMatchObject({ status: 'failed', reason: 'infrastructure_error', egress: { allowed: 0, denied: 0 } });
    expect(outcome.state.detail).toMatch(
      /egress proxy image coding-agent-proxy:no-such-tag not found; build it with docker\/build-proxy-image\.sh/,
    );
  });

  it('lists the cache images with `cache list` and removes them with `cache prune`', async () => {
    const listed = JSON.parse((await cli('cache', 'list', '--json')).stdout) as CachedSetup[];
    const mine = listed.find((i) => i.key === installKey)!;
    expect(mine).toMatchObject({
      tag: `coding-agent-setup:${installKey}`,
      allow: [INDEX_HOST],
      commands: [pipInstall(index.port).join(' ')],
    });
    expect(mine.layer_bytes).toBeGreaterThan(0);
    const pruned = JSON.parse((await cli('cache', 'prune', '--json')).stdout) as { removed: string[]; kept: unknown[] };
    expect(pruned.removed).toContain(installKey);
    expect((JSON.parse((await cli('cache', 'list', '--json')).stdout) as CachedSetup[]).map((i) => i.key)).not.toContain(installKey);
  });
});

describe('credentials stay outside the sandbox', () => {
  const token = `Bearer egress-${randomBytes(16).toString('hex')}`;
  const TOKEN_ENV = 'PRIVATE_INDEX_TOKEN';
  let privateIndex: Upstream;

  beforeAll(async () => {
    privateIndex = await packageIndex([{ name: 'greetlib', ...wheel }], { name: 'Authorization', value: token });
  });
  afterAll(() => privateIndex?.close());

  it('puts the real header on requests to its host while the sandbox holds a placeholder: no value in the image, its environment, history, store or logs', async () => {
    const url = `http://token:$${TOKEN_ENV}@${INDEX_HOST}:${privateIndex.port}/simple/`;
    const repo = pythonRepo({
      setup: {
        commands: [
          ['sh', '-c', `env > /workspace/setup-env.txt && printf '%s' "$${TOKEN_ENV}" > /workspace/token-seen.txt`],
          [
            'sh',
            '-c',
            `pip install --no-cache-dir --break-system-packages --disable-pip-version-check --index-url "${url}" --trusted-host ${INDEX_HOST} greetlib`,
          ],
        ],
        timeout_s: 120,
      },
      egress: { allow: [INDEX_HOST], credentials: ['private-index'] },
    });
    // The operator's: its variable, header and host, over plain HTTP as this index speaks it.
    const credentials = credentialsFile([
      { name: 'private-index', env: TOKEN_ENV, header: 'Authorization', hosts: [INDEX_HOST], plain_http: true },
    ]);
    const stateDir = tempDir('agent-state');
    const taskQueue = uniqueQueue('egress-credentials');
    const worker = spawnWorker(env, taskQueue, stateDir, {
      [TOKEN_ENV]: token,
      AGENT_EGRESS_HOSTS: hosts,
      AGENT_EGRESS_OPEN_CIDRS: `${gateway}/32`,
      AGENT_CREDENTIALS_FILE: credentials,
      AGENT_ALLOWED_IMAGES: allowingPip(readSettings().allowedImages).allowedImages.join(','),
    });
    let log = '';
    worker.stderr!.on('data', (b: Buffer) => (log += b.toString('utf8')));
    let outcome: RunOutcome;
    const workflowId = `${taskQueue}-run`;
    try {
      const handle = await startRunWithArgs(env.client, [repoInput(repo)], { taskQueue, workflowId });
      outcome = (await handle.result()) as RunOutcome;
    } finally {
      worker.kill('SIGTERM');
      await killed(worker);
    }
    expect(outcome.record).toMatchObject({ status: 'completed', egress: { denied: 0 } });
    expect(outcome.record.egress!.allowed).toBeGreaterThanOrEqual(2);
    // The upstream got the real header, and only it (it answers 401 to anything else).
    const got = privateIndex.requests.map((r) => r.headers.authorization);
    expect(got.length).toBeGreaterThanOrEqual(2);
    expect(new Set(got)).toEqual(new Set([token]));
    // Inside: the placeholder, in the environment every command had.
    const workspace = join(stateDir, 'runs', outcome.trace.run_id, 'workspace');
    expect(readFileSync(join(workspace, 'token-seen.txt'), 'utf8')).toBe(placeholder(TOKEN_ENV));
    expect(readFileSync(join(workspace, 'setup-env.txt'), 'utf8')).toContain(`${TOKEN_ENV}=${placeholder(TOKEN_ENV)}`);
    // The committed cache image: its file system and its configuration.
    const image = outcome.state.setup!.image_id!;
    const inspect = await new Dockerode().getImage(image).inspect();
    expect((inspect.Config.Env ?? []).map((e) => e.split('=')[0]).sort()).toEqual(['HOME', 'LANG', 'PATH', 'PYTHONDONTWRITEBYTECODE']);
    const needles = [token, ...fragments(token.slice('Bearer '.length), 12)];
    const fsBytes = await imageBytes(image);
    expect(fsBytes.includes(placeholder(TOKEN_ENV))).toBe(true); // the archive is searchable: the placeholder is found
    expect(needles.filter((n) => fsBytes.includes(n))).toEqual([]);
    expect(JSON.stringify(inspect).includes(token)).toBe(false);
    // History (payloads decoded), the state folder (store, ledger, workspaces, control folders), the worker's log.
    const history = await historyJson(env.address, workflowId);
    expect(history).toContain(`"host":"${INDEX_HOST}"`); // decoded: the run's egress events are there
    expect(leaks(needles, { texts: { history, 'worker log': log }, dirs: [stateDir] })).toEqual([]);
  });
});

describe("HTTPS upstreams through the setup's own certificate authority (egress.tls: intercept)", () => {
  const token = `Bearer tls-${randomBytes(16).toString('hex')}`;
  const TOKEN_ENV = 'SECURE_INDEX_TOKEN';
  const certificates = testCertificates(INDEX_HOST);
  let secure: Upstream;

  beforeAll(async () => {
    secure = await packageIndex([{ name: 'greetlib', ...wheel }], { name: 'Authorization', value: token }, certificates);
  });
  afterAll(() => secure?.close());

  it('judges and audits the requests inside HTTPS: a POST refused, the real header set on the GETs, the authority a certificate only, its key never in the container', async () => {
    const base = `https://${INDEX_HOST}:${secure.port}`;
    const post = [
      'import sys, urllib.request, urllib.error',
      'try:',
      `    urllib.request.urlopen(urllib.request.Request("${base}/upload", data=b"x"), timeout=10)`,
      'except urllib.error.HTTPError as e:',
      '    print("upload", e.code)',
      '    sys.exit(0 if e.code == 403 else 1)',
      'sys.exit(1)',
    ].join('\n');
    const repo = pythonRepo({
      setup: {
        commands: [
          python(post),
          [
            'sh',
            '-c',
            `cp ${SETUP_CA_DIR}/ca.pem /workspace/setup-ca.pem && pip install --no-cache-dir --break-system-packages --disable-pip-version-check --index-url "https://token:$${TOKEN_ENV}@${INDEX_HOST}:${secure.port}/simple/" greetlib`,
          ],
        ],
        timeout_s: 120,
      },
      egress: { allow: [INDEX_HOST], tls: 'intercept', credentials: ['secure-index'] },
    });
    process.env[TOKEN_ENV] = token; // the in-process worker's environment
    let result;
    try {
      result = await runOnce(env, repoInput(repo), {
        // HTTPS on the server's own port: CONNECT there is the operator's to allow.
        settings: { ...settings(), egressUpstreamCa: certificates.caFile, egressConnectPorts: [secure.port] },
        // The operator's credentials file, in the worker's state folder (its default place).
        prepareState: (dir) =>
          writeFileSync(
            join(dir, 'credentials.json'),
            JSON.stringify({
              schema_version: 1,
              credentials: [{ name: 'secure-index', env: TOKEN_ENV, header: 'Authorization', hosts: [INDEX_HOST] }],
            }),
          ),
      });
    } finally {
      delete process.env[TOKEN_ENV];
    }
    const { outcome, trace, stateDir, runId } = result;
    expect(outcome.record).toMatchObject({ status: 'completed', egress: { denied: 1 } });
    expect(ofType(trace, 'egress_denied').map((e) => e.data)).toEqual([
      { host: INDEX_HOST, port: secure.port, method: 'POST', bytes: expect.any(Number), status: 403, reason: 'method not allowed' },
    ]);
    const allowed = ofType(trace, 'egress_allowed').map((e) => e.data as { method: string; port: number });
    expect(allowed.length).toBeGreaterThanOrEqual(2);
    expect(allowed.every((e) => e.method === 'GET' && e.port === secure.port)).toBe(true); // no CONNECT: the requests inside are the events
    // The upstream saw TLS requests with the real header only, and no POST.
    expect(secure.requests.map((r) => r.method)).not.toContain('POST');
    expect(new Set(secure.requests.map((r) => r.headers.authorization))).toEqual(new Set([token]));
    // The sandbox trusted a certificate of this setup's own authority; the image has no key and no authority.
    const seen = readFileSync(join(stateDir, 'runs', runId, 'workspace', 'setup-ca.pem'), 'utf8');
    expect(seen).toMatch(/^-----BEGIN CERTIFICATE-----\n[\s\S]+-----END CERTIFICATE-----\n$/);
    expect(seen).not.toMatch(/PRIVATE KEY/);
    // What the setup wrote is the image's top layer (the base image's libraries carry sample keys of their own).
    const layer = await topLayer(outcome.state.setup!.image_id!);
    expect(layer.includes('greetlib')).toBe(true); // the layer searched is the setup's
    expect(/-----BEGIN (RSA |EC )?PRIVATE KEY-----/.test(layer.toString('latin1'))).toBe(false);
    expect(layer.includes('coding-agent setup CA')).toBe(false);
    expect((await imageBytes(outcome.state.setup!.image_id!)).includes(token)).toBe(false);
    expect(existsSync(join(stateDir, 'runs', runId, 'control', 'setup-ca'))).toBe(false);
  });
});

describe('what a setup leaves', () => {
  it("runs a fixture's setup on docker with its product in the baseline, and refuses it on the local backend before any workspace", async () => {
    const dir = join(tempDir('setup-fixture'), 'linkcheck-nested');
    cpSync(LINKCHECK, dir, { recursive: true });
    const fixture = JSON.parse(readFileSync(join(dir, 'fixture.json'), 'utf8')) as Record<string, unknown>;
    writeFileSync(
      join(dir, 'fixture.json'),
      JSON.stringify({
        ...fixture,
        setup: { commands: [python('open("setup-note.txt", "w").write("made by the setup\\n")')], timeout_s: 60 },
      }),
    );
    const input = (backend: 'local' | 'docker') =>
      canonicalInput('canonical', {
        fixture: dir,
        source: { kind: 'replay', path: join(dir, 'replays', 'canonical.json'), trusted: true },
        backend,
      });
    const local = await runOnce(env, input('local'));
    expect(local.outcome.record).toMatchObject({ status: 'failed', reason: 'invalid_input' });
    expect(local.outcome.state.detail).toMatch(/runs only on the docker backend/);
    expect(existsSync(join(local.stateDir, 'runs'))).toBe(false);
    const onDocker = await runOnce(env, input('docker'), { settings: settings() });
    expect(onDocker.outcome.record).toEqual({ ...CANONICAL_RECORD, egress: { allowed: 0, denied: 0 } });
    expect(readFileSync(join(onDocker.stateDir, 'runs', onDocker.runId, 'workspace', 'setup-note.txt'), 'utf8')).toBe(
      'made by the setup\n',
    );
  });

  it("removes a dead worker's proxy and internal network with its reaper, and this file's runs left none", async () => {
    const docker = new Dockerode();
    const deadPid = spawnSync('true').pid;
    const owner = { 'coding-agent.owner': `${hostname()}:${deadPid}` };
    const network = await docker.createNetwork({
      Name: `coding-agent-egress-orphan-${randomBytes(4).toString('hex')}`,
      Internal: true,
      Labels: { 'coding-agent': 'egress', ...owner },
    });
    const proxy = await docker.createContainer({
      Image: readSettings().proxyImage,
      Cmd: ['true'],
      Labels: { 'coding-agent': 'proxy', ...owner },
      HostConfig: { NetworkMode: (await network.inspect()).Name },
    });
    expect(await new DockerBackend({ image: readSettings().sandboxImage }).removeOrphans()).toBeGreaterThanOrEqual(2);
    await expect(proxy.inspect()).rejects.toMatchObject({ statusCode: 404 });
    await expect(network.inspect()).rejects.toMatchObject({ statusCode: 404 });
    const mine = { label: [`coding-agent.owner=${hostname()}:${process.pid}`] };
    expect(await docker.listContainers({ all: true, filters: mine })).toEqual([]);
    expect(await docker.listNetworks({ filters: mine })).toEqual([]);
  });
});
