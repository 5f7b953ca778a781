/**
 * The repository is untrusted input, at the setup phase's network boundary (issue 26): what a
 * repository's `.coding-agent.json` can try against the worker's secrets and this machine's
 * network, on real repositories, a real worker, the real engine and servers of this test on this
 * machine's own addresses (test names resolve through the proxy's hosts file only). Each attempt
 * is refused or contained with its reason and reaches no server; the packet filter below squid
 * holds on its own, and a proxy whose filter cannot be installed never starts. Traffic goes only
 * to this machine: its bridge gateway, its interface addresses, and a bridge this test makes.
 */
import { execFile } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { BlockList, createServer, isIPv4, type Server } from 'node:net';
import { networkInterfaces } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { promisify } from 'node:util';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import Dockerode from 'dockerode';
import { ownerLabel } from '../../sandbox/backends/docker';
import { placeholder } from '../../sandbox/setup';
import { listSetupImages } from '../../sandbox/setup/cache';
import { createEgressNetwork, PROXY_HOSTS_PATH, startProxy } from '../../sandbox/setup/proxy';
import { filterRules, FIXED_RANGES, forbiddenRanges } from '../../sandbox/setup/ranges';
import { DENY_REASONS, squidConfig } from '../../sandbox/setup/squid';
import type { RunInput } from '../../core/contracts';
import type { TraceEvent } from '../../core/trace';
import { readSettings, type Settings } from '../../host/settings';
import {
  bridgeGateway,
  finalOnlyReplay,
  hostsFile,
  INDEX_HOST,
  packageIndex,
  PIP_IMAGE,
  allowingPip,
  plainServer,
  pythonRepo,
  testCertificates,
  type Upstream,
} from '../helpers/egress';
import { historyJson, leaks } from '../helpers/leaks';
import { freePort, PROJECT_ROOT, SETTINGS, tempDir } from '../helpers/run-dir';
import { createSandbox } from '../../worker/sandbox';
import { runOnce, startServer } from '../helpers/temporal';

jest.setTimeout(240_000);

const docker = new Dockerode();
/** A decoy in the worker's environment: the variable a repository would name to steal it. */
const DECOY_ENV = 'UNTRUSTED_EGRESS_DECOY';
const decoy = `decoy-${randomBytes(16).toString('hex')}`;
const PRIVATE_HOST = 'private.egress.test';
const MACHINE_HOST = 'machine.egress.test';
const OTHER_HOST = 'other.egress.test';
const replay = finalOnlyReplay();

let env: TestWorkflowEnvironment;
let gateway: string;
/** This machine's address on a bridge of a private range, made by this test. */
let privateNet: { network: Dockerode.Network; gateway: string };
/** An address of this machine's own interfaces (not a bridge's), when it has one. */
let machine: string | null;
let hosts: string;
let server: Upstream;
/** A plain TCP listener: counts every connection that reaches it. */
let listener: { server: Server; port: number; accepted: number };

/** The reason the proxy gives for `address`: the first fixed range holding it, else this machine's. */
function reasonFor(address: string): string {
  for (const range of FIXED_RANGES) {
    const list = new BlockList();
    for (const cidr of range.cidrs) {
      const [net, bits] = cidr.split('/');
      list.addSubnet(net, Number(bits), isIPv4(net) ? 'ipv4' : 'ipv6');
    }
    if (list.check(address, 'ipv4')) return DENY_REASONS[range.reason];
  }
  return DENY_REASONS.this_machine;
}

/** A bridge network of the engine in a private range, its gateway this machine's address there. */
async function makePrivateNetwork(): Promise<{ network: Dockerode.Network; gateway: string }> {
  const first = FIXED_RANGES.find((r) => r.reason === 'private')!.cidrs[0].split('.')[0];
  const own = Object.values(networkInterfaces()).flatMap((l) => (l ?? []).map((a) => a.address));
  for (let attempt = 0; attempt < 20; attempt++) {
    const prefix = `${first}.${64 + randomInt(180)}.${randomInt(250)}`;
    if (own.some((a) => a.startsWith(`${prefix}.`))) continue;
    try {
      const network = await docker.createNetwork({
        Name: `coding-agent-test-private-${randomBytes(4).toString('hex')}`,
        Driver: 'bridge',
        IPAM: { Config: [{ Subnet: `${prefix}.0/24`, Gateway: `${prefix}.1` }] },
        Labels: { 'coding-agent.test': 'untrusted-egress', ...ownerLabel() },
      });
      return { network, gateway: `${prefix}.1` };
    } catch (err) {
      if (!/overlap/i.test((err as Error).message)) throw err;
    }
  }
  throw new Error('no free private /24 for the test network');
}

beforeAll(async () => {
  env = await startServer();
  gateway = await bridgeGateway();
  privateNet = await makePrivateNetwork();
  machine =
    Object.entries(networkInterfaces())
      .filter(([name]) => !/^(docker|br-|veth|lo)/.test(name))
      .flatMap(([, l]) => (l ?? []).filter((a) => a.family === 'IPv4' && !a.internal).map((a) => a.address))[0] ?? null;
  hosts = hostsFile(gateway, [
    [OTHER_HOST, gateway],
    [PRIVATE_HOST, privateNet.gateway],
    ...(machine ? [[MACHINE_HOST, machine] as [string, string]] : []),
  ]);
  server = await plainServer();
  const tcp = createServer((socket) => {
    listener.accepted++;
    socket.destroy();
  });
  await new Promise<void>((r) => tcp.listen(0, '0.0.0.0', () => r()));
  listener = { server: tcp, port: (tcp.address() as { port: number }).port, accepted: 0 };
  process.env[DECOY_ENV] = decoy; // the in-process worker's environment
});

afterAll(async () => {
  delete process.env[DECOY_ENV];
  await server?.close();
  listener?.server.close();
  await privateNet?.network.remove().catch(() => undefined);
  await env?.teardown();
  // The cache images of this file's runs (their allow lists name the test's hosts only).
  for (const image of await listSetupImages(docker))
    if (image.allow.some((h) => h.endsWith('.egress.test')))
      await docker
        .getImage(image.image_id)
        .remove()
        .catch(() => undefined);
});

/** The worker's settings: the test names in the hosts file, nothing opened unless `more` says so. */
const settings = (more: Partial<Settings> = {}): Settings => ({
  ...readSettings(),
  ...allowingPip(readSettings().allowedImages),
  egressHostsFile: hosts,
  ...more,
});

/** A repository whose tests pass once its settings' setup has run (greetlib is committed). */
const repo = (settings: Record<string, unknown>) =>
  pythonRepo(settings, { 'greetlib/__init__.py': 'def greet(name):\n    return "hello " + name\n' });

function repoInput(r: { dir: string; head: string }): RunInput {
  return {
    repo: { path: r.dir, base_commit: r.head, task: 'Make the tests pass.' },
    source: { kind: 'replay', path: replay, trusted: true },
    backend: 'docker',
    approver: 'policy:approve-writable',
  };
}

const python = (code: string) => ['python3', '-c', code];
const ofType = (trace: TraceEvent[], type: string) => trace.filter((e) => e.type === type);
/** Everything the test's servers saw, as text. */
const seen = () => JSON.stringify([server.requests]);

/** Names of containers this process's workers created since `sinceMs` (engine events, by owner label; the engine's filter is by whole seconds, so the events are filtered again by their own time). */
async function containersCreated(sinceMs: number): Promise<string[]> {
  const [key, value] = Object.entries(ownerLabel())[0];
  const stream = (await docker.getEvents({
    since: Math.floor(sinceMs / 1000),
    until: Math.ceil(Date.now() / 1000) + 1,
    filters: { type: ['container'], event: ['create'], label: [`${key}=${value}`] },
  })) as unknown as NodeJS.ReadableStream;
  let text = '';
  for await (const chunk of stream) text += chunk.toString();
  return text
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as { timeNano: number; Actor: { Attributes: { name: string } } })
    .filter((e) => e.timeNano / 1e6 >= sinceMs)
    .map((e) => e.Actor.Attributes.name);
}

/** Activity types a run's history scheduled. */
async function activities(workflowId: string): Promise<string[]> {
  const events = (await env.client.workflow.getHandle(workflowId).fetchHistory()).events ?? [];
  return events.flatMap((e) => e.activityTaskScheduledEventAttributes?.activityType?.name ?? []);
}

/** A setup script that asks for each URL through the proxy and prints what came back; it exits 0 when every one was refused with 403. */
function askEach(urls: string[]): string[] {
  return python(
    [
      'import sys, urllib.request, urllib.error',
      'refused = 0',
      `for url in ${JSON.stringify(urls)}:`,
      '    try:',
      '        print(url, urllib.request.urlopen(url, timeout=15).status)',
      '    except urllib.error.HTTPError as e:',
      '        print(url, e.code); refused += e.code == 403',
      '    except OSError as e:',
      '        print(url, type(e).__name__, e); refused += "403" in str(e)',
      `sys.exit(0 if refused == ${urls.length} else 1)`,
    ].join('\n'),
  );
}

describe('a repository that reaches for a secret or this machine', () => {
  it('names a worker variable, a header and a host of its own (the old credential shape): refused by the schema naming the field, before any workspace, nothing sent', async () => {
    const before = server.requests.length;
    const r = repo({
      setup: { commands: [askEach([`http://${INDEX_HOST}:${server.port}/steal`])], timeout_s: 60 },
      egress: { allow: [INDEX_HOST], credentials: [{ host: INDEX_HOST, header: 'X-Probe', env: DECOY_ENV }] },
    });
    const { outcome, trace, stateDir, handle } = await runOnce(env, repoInput(r), { settings: settings() });
    expect(outcome.record).toMatchObject({ status: 'failed', reason: 'invalid_input' });
    expect(outcome.state.detail).toBe(
      ".coding-agent.json: egress.credentials.0: the name of a credential of the worker's credentials file (a repository names a credential; its variable, header and hosts are the operator's)",
    );
    expect(ofType(trace, 'setup_started')).toEqual([]);
    expect(existsSync(join(stateDir, 'runs'))).toBe(false); // no workspace was made
    expect(server.requests.length).toBe(before);
    const history = await historyJson(env.address, handle.workflowId);
    expect(history).toContain('invalid_input'); // decoded: the refusal is there
    expect(leaks([decoy], { texts: { history, 'what the servers saw': seen() }, dirs: [stateDir] })).toEqual([]);
  });

  it("names this machine's bridge gateway by its address: refused by the schema naming the entry, nothing sent", async () => {
    const before = server.requests.length;
    const r = repo({
      setup: { commands: [askEach([`http://${gateway}:${server.port}/`])], timeout_s: 60 },
      egress: { allow: [gateway] },
    });
    const { outcome, trace } = await runOnce(env, repoInput(r), { settings: settings() });
    expect(outcome.record).toMatchObject({ status: 'failed', reason: 'invalid_input' });
    expect(outcome.state.detail).toBe(
      `.coding-agent.json: egress.allow.0: "${gateway}": a host name, not an address (its last label must start with a letter)`,
    );
    expect(ofType(trace, 'setup_started')).toEqual([]);
    expect(server.requests.length).toBe(before);
  });

  it('reaches this machine through names that resolve to it (the bridge gateway, its address on a private network, its own interface) by plain HTTP and CONNECT: each refused after resolution with its reason, no server sees a request', async () => {
    const targets: [string, string][] = [
      [INDEX_HOST, gateway],
      [PRIVATE_HOST, privateNet.gateway],
      ...(machine ? [[MACHINE_HOST, machine] as [string, string]] : []),
    ];
    const before = server.requests.length;
    const since = Date.now();
    const r = repo({
      setup: {
        commands: [askEach([...targets.map(([name]) => `http://${name}:${server.port}/`), `https://${INDEX_HOST}/`])],
        timeout_s: 120,
      },
      egress: { allow: targets.map(([name]) => name) },
    });
    const { outcome, trace } = await runOnce(env, repoInput(r), { settings: settings() });
    // Every request refused with 403 (the command exits 0), so the run goes on and completes.
    expect(outcome.record).toMatchObject({ status: 'completed', egress: { allowed: 0, denied: targets.length + 1 } });
    expect(ofType(trace, 'egress_denied').map((e) => e.data)).toEqual([
      ...targets.map(([name, address]) => ({
        host: name,
        port: server.port,
        method: 'GET',
        bytes: expect.any(Number),
        status: 403,
        reason: reasonFor(address),
      })),
      { host: INDEX_HOST, port: 443, method: 'CONNECT', bytes: expect.any(Number), status: 403, reason: reasonFor(gateway) },
    ]);
    expect(reasonFor(privateNet.gateway)).toBe('private address');
    expect(server.requests.length).toBe(before);
    expect(listener.accepted).toBe(0);
    // The engine's events see this run's containers: an empty list below means none was made.
    expect((await containersCreated(since)).some((n) => n.startsWith('coding-agent-proxy-'))).toBe(true);
  });

  it('asks CONNECT to a port other than 443 of an opened address: refused with its reason while plain HTTP to the same host passes, and the listener accepts nothing', async () => {
    const before = server.requests.length;
    const r = repo({
      setup: {
        commands: [
          python(`import urllib.request\nurllib.request.urlopen("http://${INDEX_HOST}:${server.port}/ok", timeout=15).read()`),
          askEach([`https://${INDEX_HOST}:${listener.port}/`]),
        ],
        timeout_s: 120,
      },
      egress: { allow: [INDEX_HOST] },
    });
    const { outcome, trace } = await runOnce(env, repoInput(r), { settings: settings({ egressOpenCidrs: [`${gateway}/32`] }) });
    expect(outcome.record).toMatchObject({ status: 'completed', egress: { allowed: 1, denied: 1 } });
    expect(ofType(trace, 'egress_denied').map((e) => e.data)).toEqual([
      {
        host: INDEX_HOST,
        port: listener.port,
        method: 'CONNECT',
        bytes: expect.any(Number),
        status: 403,
        reason: 'CONNECT to a port not allowed',
      },
    ]);
    expect(server.requests.slice(before).map((q) => q.url)).toEqual(['/ok']);
    expect(listener.accepted).toBe(0);
  });

  it('names a credential the operator does not have: the worker ends the run invalid_input naming it with no setup and no container but the one that read it, and the command line refuses it with exit 2, starting nothing', async () => {
    const before = server.requests.length;
    const r = repo({
      setup: { commands: [askEach([`http://${INDEX_HOST}:${server.port}/`])], timeout_s: 60 },
      egress: { allow: [INDEX_HOST], tls: 'intercept', credentials: ['private-index'] },
    });
    // The worker's own isolation probe (measured once per process) is done before the window opens.
    await createSandbox({}, SETTINGS).isolation();
    const since = Date.now();
    const { outcome, handle } = await runOnce(env, repoInput(r), { settings: settings() });
    expect(outcome.record).toMatchObject({ status: 'failed', reason: 'invalid_input' });
    expect(outcome.state.detail).toBe(`egress.credentials: the worker's credentials file has no credential "private-index" (it has: none)`);
    const scheduled = await activities(handle.workflowId);
    expect(scheduled).toContain('loadRun');
    expect(scheduled.filter((a) => ['prepareWorkspace', 'checkIsolation', 'runSetup'].includes(a))).toEqual([]);
    // The only container is the one that read the repository (its git sandbox).
    expect((await containersCreated(since)).filter((n) => !n.startsWith('coding-agent-git-'))).toEqual([]);

    const stateDir = tempDir('agent-refused');
    const cliEnv: NodeJS.ProcessEnv = {
      ...process.env,
      AGENT_STATE_DIR: stateDir,
      AGENT_DEV_SERVER_PORT: String(await freePort()),
      AGENT_DEV_UI_PORT: String(await freePort()),
      AGENT_ALLOWED_IMAGES: settings().allowedImages.join(','),
    };
    delete cliEnv.TEMPORAL_ADDRESS;
    const cli = join(PROJECT_ROOT, 'dist', 'client', 'cli.js');
    const failed = await promisify(execFile)(
      process.execPath,
      [cli, 'run', r.dir, '--task', 'fix it', '--replay', replay, '--trust-replay', '--backend', 'docker'],
      { env: cliEnv },
    ).then(
      () => ({ code: 0, stderr: '' }),
      (e: { code: number; stderr: string }) => e,
    );
    expect(failed.code).toBe(2);
    expect(failed.stderr).toBe(
      `.coding-agent.json: egress.credentials: the worker's credentials file has no credential "private-index" (it has: none)\n`,
    );
    expect(readdirSync(stateDir)).toEqual([]); // no dev server, no worker, no workflow
    expect(server.requests.length).toBe(before);
  });
});

describe("the operator's credentials file, end to end", () => {
  const TOKEN_ENV = 'UNTRUSTED_EGRESS_INDEX_TOKEN';
  const token = `Bearer ${randomBytes(16).toString('hex')}`;
  const indexCerts = testCertificates(INDEX_HOST);
  const otherCerts = testCertificates(OTHER_HOST);
  let index: Upstream;
  let other: Upstream;

  beforeAll(async () => {
    index = await packageIndex([], undefined, indexCerts);
    other = await packageIndex([], undefined, otherCerts);
  });
  afterAll(async () => {
    await index?.close();
    await other?.close();
  });

  it('sends the credential a repository names to its listed host inside intercepted TLS, and to no other: not another allowed host, not the same host over plain HTTP', async () => {
    const upstreamCa = join(tempDir('egress-ca'), 'upstream.pem');
    writeFileSync(upstreamCa, readFileSync(indexCerts.caFile, 'utf8') + readFileSync(otherCerts.caFile, 'utf8'));
    const before = server.requests.length;
    // Each request carries the sandbox's own Authorization (its placeholder): only the proxy may replace it.
    const ask = python(
      [
        'import os, urllib.request, urllib.error',
        `mine = os.environ["${TOKEN_ENV}"]`,
        'open("/workspace/token-seen.txt", "w").write(mine)',
        `for url in ["https://${INDEX_HOST}:${index.port}/a", "https://${OTHER_HOST}:${other.port}/b", "http://${INDEX_HOST}:${server.port}/c"]:`,
        '    try:',
        '        urllib.request.urlopen(urllib.request.Request(url, headers={"Authorization": "Bearer " + mine}), timeout=15)',
        '    except urllib.error.HTTPError as e:',
        '        print(url, e.code)',
      ].join('\n'),
    );
    const r = repo({
      setup: { commands: [ask], timeout_s: 120 },
      egress: { allow: [INDEX_HOST, OTHER_HOST], tls: 'intercept', credentials: ['private-index'] },
    });
    process.env[TOKEN_ENV] = token;
    let result;
    try {
      result = await runOnce(env, repoInput(r), {
        settings: settings({
          egressOpenCidrs: [`${gateway}/32`],
          egressConnectPorts: [index.port, other.port],
          egressUpstreamCa: upstreamCa,
        }),
        prepareState: (dir) =>
          writeFileSync(
            join(dir, 'credentials.json'),
            JSON.stringify({
              schema_version: 1,
              credentials: [{ name: 'private-index', env: TOKEN_ENV, header: 'Authorization', hosts: [INDEX_HOST] }],
            }),
          ),
      });
    } finally {
      delete process.env[TOKEN_ENV];
    }
    const { outcome, stateDir, runId, handle } = result;
    expect(outcome.record).toMatchObject({ status: 'completed', egress: { allowed: 3, denied: 0 } });
    // Its host, inside TLS the proxy ended: the real header in place of the sandbox's.
    expect(index.requests.map((q) => [q.url, q.headers.authorization])).toEqual([['/a', token]]);
    // Another allowed host gets what the sandbox sent (its placeholder), never the value.
    expect(other.requests.map((q) => [q.url, q.headers.authorization])).toEqual([['/b', `Bearer ${placeholder(TOKEN_ENV)}`]]);
    // Its host over plain HTTP: the sandbox's header removed, the real one not added.
    expect(server.requests.slice(before).map((q) => [q.url, q.headers.authorization])).toEqual([['/c', undefined]]);
    expect(readFileSync(join(stateDir, 'runs', runId, 'workspace', 'token-seen.txt'), 'utf8')).toBe(placeholder(TOKEN_ENV));
    const history = await historyJson(env.address, handle.workflowId);
    const value = token.slice('Bearer '.length);
    expect(
      leaks([value], { texts: { history, 'the other host': JSON.stringify(other.requests), 'plain HTTP': seen() }, dirs: [stateDir] }),
    ).toEqual([]);
  });
});

describe('the packet filter below squid', () => {
  /** A proxy started by the harness's own code, with the real filter, but squid's address rules left out. */
  async function proxyWithoutAddressRules(open: string[]) {
    const network = await createEgressNetwork(docker);
    const forbidden = await forbiddenRanges(docker);
    const lines: string[] = [];
    try {
      const proxy = await startProxy(docker, {
        image: readSettings().proxyImage,
        network,
        upstream: readSettings().egressNetwork,
        hosts: readFileSync(hosts, 'utf8'),
        intercept: null,
        filter: filterRules({ clients: network.subnet, open, dns: false, forbidden }),
        config: (address) =>
          squidConfig({
            listen: address,
            clients: network.subnet,
            egress: { allow: [INDEX_HOST] },
            credentials: [],
            forbidden: [], // the test's override: squid itself would let any address through
            open: [],
            connectPorts: [443],
            hostsFile: hosts,
            hostsPath: PROXY_HOSTS_PATH,
            intercept: null,
          }),
        onRequest: (line) => lines.push(line),
      });
      return { network, proxy, lines };
    } catch (err) {
      await network.remove();
      throw err;
    }
  }

  /** Runs `code` with python3 in a container on `network`, through the proxy; its output. */
  async function client(network: string, proxy: string, code: string): Promise<string> {
    const out = new PassThrough();
    let text = '';
    out.on('data', (b: Buffer) => (text += b.toString('utf8')));
    const [, container] = (await docker.run(PIP_IMAGE, ['python3', '-c', code], out, {
      Env: [`http_proxy=${proxy}`],
      Labels: { 'coding-agent': 'sandbox', ...ownerLabel() },
      HostConfig: { NetworkMode: network, CapDrop: ['ALL'] },
    })) as [unknown, Dockerode.Container];
    await container.remove({ force: true });
    return text;
  }

  /** A TCP connection from inside the proxy's own container (its user, its namespace) to `address:port`. */
  async function connectFromProxy(id: string, address: string, port: number): Promise<{ code: number | null; output: string }> {
    const exec = await docker.getContainer(id).exec({
      Cmd: ['timeout', '10', 'bash', '-c', `exec 3<>/dev/tcp/${address}/${port} && echo connected`],
      AttachStdout: true,
      AttachStderr: true,
    });
    const stream = await exec.start({ hijack: true, stdin: false });
    const out = new PassThrough();
    let output = '';
    out.on('data', (b: Buffer) => (output += b.toString('utf8')));
    docker.modem.demuxStream(stream, out, out);
    await new Promise((r) => stream.on('end', r));
    return { code: (await exec.inspect()).ExitCode, output };
  }

  it("refuses this machine's bridge gateway on its own, through squid and from inside the proxy's container; opened in the filter, the same request arrives", async () => {
    const ask = `import urllib.request, urllib.error\ntry:\n    print(urllib.request.urlopen("http://${INDEX_HOST}:${server.port}/through", timeout=30).status)\nexcept urllib.error.HTTPError as e:\n    print(e.code)`;
    const before = server.requests.length;
    const closed = await proxyWithoutAddressRules([]);
    try {
      const url = `http://${closed.proxy.address}:${closed.proxy.port}`;
      expect((await client(closed.network.name, url, ask)).trim()).toBe('503'); // squid allowed it; the filter refused the connection
      expect(server.requests.length).toBe(before);
      const direct = await connectFromProxy(closed.proxy.id, gateway, listener.port);
      expect(direct.code).not.toBe(0);
      expect(direct.output).toMatch(/No route to host/);
      expect(listener.accepted).toBe(0);
    } finally {
      await closed.proxy.stop();
      await closed.network.remove();
    }
    expect(closed.lines.some((l) => l.startsWith(`GET ${INDEX_HOST} ${server.port} TCP_MISS 503 `))).toBe(true);

    const opened = await proxyWithoutAddressRules([`${gateway}/32`]);
    try {
      const url = `http://${opened.proxy.address}:${opened.proxy.port}`;
      expect((await client(opened.network.name, url, ask)).trim()).toBe('200');
      expect(server.requests.slice(before).map((q) => q.url)).toEqual(['/through']);
      expect((await connectFromProxy(opened.proxy.id, gateway, listener.port)).output.trim()).toBe('connected');
      expect(listener.accepted).toBe(1);
    } finally {
      listener.accepted = 0;
      await opened.proxy.stop();
      await opened.network.remove();
    }
  });

  it('never starts a proxy whose filter cannot be installed: the setup ends infrastructure_error naming the filter, no command runs, nothing is sent', async () => {
    const image = `coding-agent-proxy-nofilter:test-${process.pid}`;
    const maker = await docker.createContainer({
      Image: readSettings().proxyImage,
      User: '0:0',
      Entrypoint: [],
      Cmd: ['rm', '-f', '/usr/sbin/xtables-nft-multi', '/usr/sbin/xtables-legacy-multi'],
      HostConfig: { NetworkMode: 'none' },
    });
    await maker.start();
    await maker.wait();
    const [repository, tag] = image.split(':');
    await maker.commit({ repo: repository, tag });
    await maker.remove();
    const before = server.requests.length;
    try {
      const r = repo({
        setup: { commands: [askEach([`http://${INDEX_HOST}:${server.port}/`])], timeout_s: 60 },
        egress: { allow: [INDEX_HOST] },
      });
      const { outcome, trace } = await runOnce(env, repoInput(r), {
        settings: settings({ proxyImage: image, egressOpenCidrs: [`${gateway}/32`] }),
      });
      expect(outcome.record).toMatchObject({ status: 'failed', reason: 'infrastructure_error' });
      expect(outcome.state.detail).toMatch(/^the egress proxy's packet filter could not be installed \(exit \d+\): .*not found/);
      expect(ofType(trace, 'setup_command')).toEqual([]);
      expect(server.requests.length).toBe(before);
    } finally {
      await docker.getImage(image).remove({ force: true });
    }
  });
});
