/**
 * Measures, rather than assumes, the isolation of the docker backend: a probe runs inside a
 * container started by `backend.exec` (the same code path and settings as every candidate-test
 * and acceptance process) and tries things that must fail. The probe only reports facts; the
 * verdicts are made here, against the limits the backend declares, so a weakened container
 * (see `ProbeOptions.override`) is caught rather than trusted.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { networkInterfaces, tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  DockerBackend,
  engineError,
  MOUNT_ACCEPTANCE,
  MOUNT_OUT,
  MOUNT_WORKSPACE,
  type ContainerSettings,
  type SettingsOverride,
} from '../backends/docker';
import { parseShellProbe, shellProbeArgv } from './probe-shell';
import { BackendUnavailableError } from '../backends/types';
import type { ProbeFacts } from './facts';

export interface IsolationCheck {
  ok: boolean;
  detail: string;
}

export interface IsolationReport {
  verified: boolean;
  checks: Record<string, IsolationCheck>;
  image_id: string | null;
  settings: ContainerSettings;
  /** Set when no probe could run (e.g. `runtime_unavailable`, `image_missing`). */
  reason_detail?: string;
}

export interface ProbeOptions {
  /** Run the probe with weakened settings, to show that the probe notices. */
  override?: SettingsOverride;
  timeoutMs?: number;
  signal?: AbortSignal;
  /**
   * The setup phase (the backend has `setupOverride`'s settings): the proxy must be reachable,
   * nothing else (the host's addresses, and `targets`, e.g. the network's gateway address, must
   * not be), and no credential value may be visible.
   */
  setup?: SetupProbe;
}

export interface SetupProbe {
  proxy: [string, number];
  /** More addresses of the host to try beside the engine bridge's gateway and the host's interfaces (the internal network's gateway address). */
  hosts: string[];
  /** The real credential values: none may be visible in the sandbox. */
  secrets: string[];
}

const SECRET_NAME = 'AGENT_PROBE_SECRET';

/**
 * The probe: `probe.py` beside this file (the build copies it next to the compiled one, see
 * scripts/copy-assets.js). It runs as `python3 -c <its text> <config>`: nothing of the host is
 * mounted for it. argv[1] is a JSON object: {targets: [[host, port]...], pids_bound, memory_bound}.
 * It prints exactly one JSON object of facts on its last stdout line.
 */
export const PROBE_FILE = join(__dirname, 'probe.py');

let probeText: string | null = null;

/** The probe's source, read once; a build without it fails the probe with the missing path named. */
export function probeSource(): string {
  probeText ??= readFileSync(PROBE_FILE, 'utf8');
  return probeText;
}

/**
 * Where the probe connects: only to the host listener, through addresses of this machine: the
 * engine's bridge gateway (the host as seen from a bridged container; its interface is down, and
 * so not listed by networkInterfaces(), while no container is attached) and the host's own
 * interface addresses. No address off this machine is ever a target; "no way out" is shown by
 * the interface, route and resolver checks, which read the sandbox's tables and send nothing.
 */
export async function connectTargets(backend: DockerBackend, listenerPort: number): Promise<[string, number][]> {
  const hosts = new Set<string>(await bridgeGateways(backend));
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) {
      if (a.family === 'IPv4' && !a.internal) hosts.add(a.address);
    }
  }
  return [...hosts].map((host): [string, number] => [host, listenerPort]);
}

async function bridgeGateways(backend: DockerBackend): Promise<string[]> {
  try {
    const info = (await backend.engine().getNetwork('bridge').inspect()) as {
      IPAM?: { Config?: { Gateway?: string; Subnet?: string }[] };
    };
    // The default bridge often lists only its subnet; the engine then gives the gateway the
    // subnet's first address.
    return (info.IPAM?.Config ?? [])
      .map((c) => c.Gateway ?? firstHost(c.Subnet ?? ''))
      .filter((g): g is string => g !== null && /^\d+\.\d+\.\d+\.\d+$/.test(g));
  } catch (err) {
    // An engine without a default bridge network has no such gateway to probe.
    if ((err as { statusCode?: number }).statusCode === 404) return [];
    throw engineError(err);
  }
}

function firstHost(cidr: string): string | null {
  const m = /^(\d+)\.(\d+)\.(\d+)\.(\d+)\/(\d+)$/.exec(cidr);
  if (!m) return null;
  const bits = Number(m[5]);
  const addr = ((Number(m[1]) << 24) | (Number(m[2]) << 16) | (Number(m[3]) << 8) | Number(m[4])) >>> 0;
  const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
  const host = (((addr & mask) >>> 0) + 1) >>> 0;
  return [host >>> 24, (host >>> 16) & 255, (host >>> 8) & 255, host & 255].join('.');
}

/** A host listener: any connection it accepts proves the sandbox reached the host. */
function listen(): Promise<{ server: Server; port: number; accepted: () => number }> {
  return new Promise((resolve, reject) => {
    let count = 0;
    const server = createServer((socket) => {
      count++;
      socket.destroy();
    });
    server.once('error', reject);
    server.listen(0, '0.0.0.0', () => {
      const address = server.address();
      if (address === null || typeof address === 'string') return reject(new Error('listener has no port'));
      resolve({ server, port: address.port, accepted: () => count });
    });
  });
}

const ENGINE_MOUNTS = new Set(['/etc/hostname', '/etc/hosts', '/etc/resolv.conf']);

function mountAllowed(target: string): boolean {
  const under = (root: string) => target === root || target.startsWith(root + '/');
  return (
    target === '/' ||
    target === '/tmp' ||
    ENGINE_MOUNTS.has(target) ||
    [MOUNT_WORKSPACE, MOUNT_OUT, MOUNT_ACCEPTANCE].includes(target) ||
    under('/proc') ||
    under('/dev') ||
    under('/sys')
  );
}

function judge(
  facts: ProbeFacts,
  expected: ContainerSettings,
  secret: string,
  rawOutput: string,
  accepted: number,
  setup?: SetupProbe,
): Record<string, IsolationCheck> {
  return {
    ...networkChecks(facts, expected, accepted, setup),
    ...fileChecks(facts, expected, setup),
    ...environmentChecks(facts, expected, secret, rawOutput, setup),
    ...limitChecks(facts, expected),
    ...identityChecks(facts, expected, setup),
  };
}

/** Where the sandbox can reach: nothing of the host (the setup phase: the proxy, and only it), no route out, no resolver beyond. */
function networkChecks(
  facts: ProbeFacts,
  expected: ContainerSettings,
  accepted: number,
  setup?: SetupProbe,
): Record<string, IsolationCheck> {
  const checks: Record<string, IsolationCheck> = {};
  const set = (name: string, ok: boolean, detail: string) => (checks[name] = { ok, detail });
  const proxyTarget = setup ? `${setup.proxy[0]}:${setup.proxy[1]}` : null;
  const hostNet = facts.net.filter((n) => n.target !== proxyTarget);
  const reached = hostNet.filter((n) => n.result === 'connected' || n.result === 'ECONNREFUSED');
  const missing = facts.missing ?? [];
  if (missing.length > 0) set('probe_tools', false, `the image has no ${missing.join(', ')}, which the shell probe needs`);
  set(
    'network',
    hostNet.length > 0 && reached.length === 0,
    missing.includes('nc')
      ? 'the image has no nc: the shell probe cannot try the network'
      : hostNet.map((n) => `${n.target} ${n.result}`).join(', '),
  );
  const outward = facts.routes.filter((r) => r.iface !== 'lo');
  const routeText = (rs: ProbeFacts['routes']) => rs.map((r) => `${r.family} ${r.dest}/${r.mask} dev ${r.iface}`).join(', ');
  if (setup) {
    // The setup phase: one interface (the run's internal network), and the proxy the one peer.
    const proxy = facts.net.find((n) => n.target === proxyTarget);
    set('proxy', proxy?.result === 'connected', `${proxyTarget} ${proxy?.result ?? 'not tried'}`);
    const own = facts.interfaces.filter((i) => i !== 'lo');
    set('interfaces', own.length === 1, facts.interfaces.join(','));
    const elsewhere = outward.filter((r) => r.iface !== own[0]);
    set(
      'routes',
      own.length === 1 && elsewhere.length === 0,
      `${outward.length ? routeText(outward) : 'none beyond lo'} (only the internal network's interface may have routes; what they reach is tried above)`,
    );
    const declared = (expected.hostConfig as { Dns?: string[] }).Dns ?? [];
    const forwardsToProxy = declared.length > 0 && declared.every((d) => d === setup.proxy[0]);
    const bad = facts.nameservers.filter((ns) => !(ns === setup.proxy[0] || (isLoopback(ns) && forwardsToProxy)));
    set(
      'resolver',
      bad.length === 0,
      facts.nameservers
        .map(
          (ns) =>
            `${ns}: ${ns === setup.proxy[0] ? 'the proxy (it answers no DNS)' : isLoopback(ns) && forwardsToProxy ? `the engine's resolver in the sandbox, forwarding only to the proxy ${setup.proxy[0]} (no DNS there)` : 'a resolver beyond the proxy'}`,
        )
        .join(', ') || 'no nameserver configured',
    );
  } else {
    set(
      'interfaces',
      facts.interfaces.every((i) => i === 'lo'),
      facts.interfaces.join(','),
    );
    set(
      'routes',
      outward.length === 0,
      outward.length ? `routes beyond loopback: ${routeText(outward)}` : `${facts.routes.length} route(s), all on lo`,
    );
    const resolvers = facts.nameservers.map((ns) => ({ ns, path: resolverPath(ns, facts) }));
    set(
      'resolver',
      resolvers.every((r) => r.path === null),
      resolvers.map((r) => `${r.ns}: ${r.path ?? 'unreachable (no route, nothing bound)'}`).join(', ') || 'no nameserver configured',
    );
  }
  set('host_listener', accepted === 0, `${accepted} connection(s) accepted by the host listener`);
  return checks;
}

/** What the sandbox can write: /out only (and, during a setup, its own root file system). */
function fileChecks(facts: ProbeFacts, expected: ContainerSettings, setup?: SetupProbe): Record<string, IsolationCheck> {
  const checks: Record<string, IsolationCheck> = {};
  const set = (name: string, ok: boolean, detail: string) => (checks[name] = { ok, detail });
  const refused = (p: string) => facts.writes[p] !== 'written';
  if (setup && !expected.hostConfig.ReadonlyRootfs) {
    // The setup's changes to the image are its product; they stay in the run's image, not the host's.
    set('write_root', true, `/probe: ${facts.writes['/probe']} (the root file system is writable during setup by design)`);
    set('write_usr', true, `/usr/probe: ${facts.writes['/usr/probe']} (the root file system is writable during setup by design)`);
  } else {
    set('write_root', refused('/probe'), `/probe: ${facts.writes['/probe']}`);
    set('write_usr', refused('/usr/probe'), `/usr/probe: ${facts.writes['/usr/probe']}`);
  }
  set('write_workspace_ro', refused('/workspace/probe'), `/workspace/probe: ${facts.writes['/workspace/probe']}`);
  set('out_writable', facts.writes['/out/probe'] === 'written', `/out/probe: ${facts.writes['/out/probe']}`);

  return checks;
}

/** What the sandbox sees of the host: no secret, no extra variable, no engine socket, no strange mount. */
function environmentChecks(
  facts: ProbeFacts,
  expected: ContainerSettings,
  secret: string,
  rawOutput: string,
  setup?: SetupProbe,
): Record<string, IsolationCheck> {
  const checks: Record<string, IsolationCheck> = {};
  const set = (name: string, ok: boolean, detail: string) => (checks[name] = { ok, detail });
  const proc1 = Array.isArray(facts.proc1_environ) ? facts.proc1_environ : [];
  const secrets = [secret, ...(setup?.secrets ?? [])];
  const leaked =
    secrets.some((v) => rawOutput.includes(v) || proc1.some((e) => e.includes(v))) ||
    SECRET_NAME in facts.environ ||
    proc1.some((e) => e.startsWith(`${SECRET_NAME}=`));
  set(
    'env_secret',
    !leaked && Array.isArray(facts.proc1_environ),
    leaked
      ? `${SECRET_NAME} from the host environment${setup?.secrets.length ? ' or an egress credential' : ''} is visible in the sandbox`
      : Array.isArray(facts.proc1_environ)
        ? `${SECRET_NAME}${setup?.secrets.length ? ` and ${setup.secrets.length} egress credential value(s)` : ''} not visible in environ nor /proc/1/environ`
        : `/proc/1/environ ${facts.proc1_environ}`,
  );
  const allowedNames = new Set([...expected.env.map((e) => e.split('=')[0]), 'HOSTNAME']);
  const names = [...new Set([...Object.keys(facts.environ), ...proc1.map((e) => e.split('=')[0])])].sort();
  const extra = names.filter((n) => !allowedNames.has(n));
  set('env_minimal', extra.length === 0, extra.length ? `unexpected: ${extra.join(',')}` : names.join(','));

  const socks = Object.entries(facts.docker_sock).filter(([, present]) => present);
  const sockMounts = facts.mounts.filter((m) => m.includes('docker.sock'));
  set(
    'docker_socket',
    socks.length === 0 && sockMounts.length === 0,
    socks.length || sockMounts.length ? `visible: ${[...socks.map(([p]) => p), ...sockMounts].join(',')}` : 'no docker.sock visible',
  );
  const strange = facts.mounts.filter((m) => !mountAllowed(m));
  set('mounts', strange.length === 0, strange.length ? `unexpected: ${strange.join(',')}` : facts.mounts.join(','));

  return checks;
}

/** Processes and memory bounded by the settings. */
function limitChecks(facts: ProbeFacts, expected: ContainerSettings): Record<string, IsolationCheck> {
  const checks: Record<string, IsolationCheck> = {};
  const set = (name: string, ok: boolean, detail: string) => (checks[name] = { ok, detail });
  const missing = facts.missing ?? [];
  const pidsLimit = expected.hostConfig.PidsLimit;
  set(
    'pids_limit',
    // A shell that does not name the errno of its failed fork (dash) stops all the same.
    (facts.pids.stopped_by === 'EAGAIN' || facts.pids.stopped_by.startsWith('fork_failed')) && facts.pids.forked < pidsLimit,
    missing.includes('sleep')
      ? 'the image has no sleep: the shell probe cannot run its fork test'
      : `${facts.pids.forked} forks, then ${facts.pids.stopped_by} (limit ${pidsLimit})`,
  );
  const memLimit = expected.hostConfig.Memory;
  const mib = (n: number) => `${Math.round(n / 1048576)} MiB`;
  set(
    'memory_limit',
    facts.memory.outcome !== 'bound' &&
      !facts.memory.outcome.startsWith('probe_error') &&
      facts.memory.returncode !== 0 &&
      facts.memory.allocated <= memLimit,
    `allocator stopped by ${facts.memory.outcome} (rc ${facts.memory.returncode}) after ${mib(facts.memory.allocated)} (limit ${mib(memLimit)})`,
  );

  return checks;
}

/** Who the sandbox runs as: not root (a setup: the declared user), no new privileges, no capabilities, seccomp on. */
function identityChecks(facts: ProbeFacts, expected: ContainerSettings, setup?: SetupProbe): Record<string, IsolationCheck> {
  const checks: Record<string, IsolationCheck> = {};
  const set = (name: string, ok: boolean, detail: string) => (checks[name] = { ok, detail });
  const { uid, euid, gid, egid } = facts.ids;
  if (setup) {
    // The setup runs as the user its settings declare (root, with no capabilities: checked below).
    const [wantUid, wantGid] = expected.user.split(':').map(Number);
    set(
      'uid',
      uid === wantUid && euid === wantUid && gid === wantGid && egid === wantGid,
      `uid ${uid} euid ${euid} gid ${gid} egid ${egid} (declared ${expected.user}; every capability dropped)`,
    );
  } else {
    set('uid', uid !== 0 && euid !== 0 && gid !== 0 && egid !== 0, `uid ${uid} euid ${euid} gid ${gid} egid ${egid}`);
  }
  set('no_new_privs', facts.status.NoNewPrivs === '1', `NoNewPrivs ${facts.status.NoNewPrivs}`);
  const zero = (v: string | null) => v !== null && /^0+$/.test(v);
  set(
    'capabilities',
    zero(facts.status.CapEff) && zero(facts.status.CapPrm) && zero(facts.status.CapBnd) && zero(facts.status.CapAmb),
    `CapEff ${facts.status.CapEff} CapPrm ${facts.status.CapPrm} CapBnd ${facts.status.CapBnd} CapAmb ${facts.status.CapAmb}`,
  );
  set('seccomp', facts.status.Seccomp === '2', `Seccomp mode ${facts.status.Seccomp}`);
  return checks;
}

const isLoopback = (addr: string) => /^127\./.test(addr) || addr === '::1';

/**
 * How a nameserver could answer, or null when it cannot: only through a route beyond loopback
 * or, on a loopback address, through a socket bound inside the sandbox (on any port: an engine's
 * embedded resolver redirects port 53 to one of its own).
 */
function resolverPath(ns: string, facts: ProbeFacts): string | null {
  const v6 = ns.includes(':');
  if (isLoopback(ns)) {
    const wildcard = v6 ? '0000:0000:0000:0000:0000:0000:0000:0000:' : '0.0.0.0:';
    const bound = facts.sockets.filter((s) => s.startsWith(`${ns}:`) || s.startsWith(wildcard));
    return bound.length ? `sockets bound in the sandbox: ${bound.join(' ')}` : null;
  }
  const routes = facts.routes.filter((r) => r.family === (v6 ? 'ipv6' : 'ipv4') && r.iface !== 'lo');
  return routes.length ? `routed through ${[...new Set(routes.map((r) => r.iface))].join(',')}` : null;
}

function parseFacts(stdout: string): ProbeFacts | null {
  const last = stdout.trim().split('\n').pop() ?? '';
  try {
    const value = JSON.parse(last) as ProbeFacts;
    return typeof value === 'object' && value !== null && Array.isArray(value.net) ? value : null;
  } catch {
    return null;
  }
}

/**
 * Runs the probe in a container with the backend's settings (or `options.override` on top) and
 * judges the facts against the backend's declared settings. Never throws for an unusable
 * engine: that is `{verified: false, reason_detail}`.
 */
export async function probeIsolation(backend: DockerBackend, options: ProbeOptions = {}): Promise<IsolationReport> {
  const expected = backend.settings();
  const probed = options.override ? backend.withOverride(options.override) : backend;
  const settings = probed.settings();
  let imageId: string;
  try {
    imageId = await probed.imageId();
  } catch (err) {
    if (err instanceof BackendUnavailableError) {
      return { verified: false, checks: {}, image_id: null, settings, reason_detail: err.detail };
    }
    throw err;
  }

  const scratch = await mkdtemp(join(tmpdir(), 'isolation-probe-'));
  await mkdir(join(scratch, 'workspace'));
  const listener = await listen();
  // The secret is planted in this process's environment, where a leaky backend would pick it
  // up; it is never passed to the probe.
  const secret = randomBytes(16).toString('hex');
  const previous = process.env[SECRET_NAME];
  process.env[SECRET_NAME] = secret;
  try {
    const setup = options.setup;
    const config = {
      targets: [
        ...(await connectTargets(probed, listener.port)),
        ...(setup ? [...setup.hosts.map((host): [string, number] => [host, listener.port]), setup.proxy] : []),
      ],
      pids_bound: expected.hostConfig.PidsLimit + 64,
      memory_bound: expected.hostConfig.Memory + 256 * 1048576,
    };
    const exec = (argv: string[]) =>
      probed.exec({
        argv,
        workspaceDir: join(scratch, 'workspace'),
        workspaceReadOnly: true,
        outDir: join(scratch, 'out'),
        timeoutMs: options.timeoutMs ?? 120_000,
        outputCapBytes: 1024 * 1024,
        signal: options.signal ?? new AbortController().signal,
      });
    // An image without python3 (any image of the engine can be a run's) gets the POSIX sh probe;
    // one with neither cannot be probed, and is never taken as verified.
    const missingRuntime = (err: unknown) => err instanceof BackendUnavailableError && err.detail === 'runtime_missing';
    let shell = false;
    let result;
    try {
      result = await exec(['python3', '-c', probeSource(), JSON.stringify(config)]);
    } catch (err) {
      if (!missingRuntime(err)) throw err;
      shell = true;
      try {
        result = await exec(shellProbeArgv(config));
      } catch (shellErr) {
        if (!missingRuntime(shellErr)) throw shellErr;
        const detail = `the image ${probed.settings().image} has neither python3 nor sh: the isolation probe cannot run in it`;
        return { verified: false, checks: { probe: { ok: false, detail } }, image_id: imageId, settings };
      }
    }
    const complete = result.exitCode === 0 && !result.stdoutTruncated;
    const facts = !complete ? null : shell ? parseShellProbe(result.stdout) : parseFacts(result.stdout);
    const checks: Record<string, IsolationCheck> = facts
      ? {
          ...(shell ? { probe: { ok: true, detail: 'the image has no python3: the POSIX sh probe (probe.sh) ran' } } : {}),
          ...judge(facts, expected, secret, result.stdout + result.stderr, listener.accepted(), setup),
        }
      : {
          probe: {
            ok: false,
            detail: `${shell ? 'shell ' : ''}probe produced no report (exit ${result.exitCode}, timedOut ${result.timedOut}, cancelled ${result.cancelled}): ${result.stderr.slice(-2000)}`,
          },
        };
    return { verified: Object.values(checks).every((c) => c.ok), checks, image_id: imageId, settings };
  } catch (err) {
    if (err instanceof BackendUnavailableError) {
      return { verified: false, checks: {}, image_id: imageId, settings, reason_detail: err.detail };
    }
    throw err;
  } finally {
    if (previous === undefined) delete process.env[SECRET_NAME];
    else process.env[SECRET_NAME] = previous;
    await new Promise<void>((resolve) => listener.server.close(() => resolve()));
    await rm(scratch, { recursive: true, force: true });
  }
}
