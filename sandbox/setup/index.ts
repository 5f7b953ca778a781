/**
 * A run's setup phase (SPEC section 11), as one activity: the setup image from the cache, or the
 * setup's commands run in the run's container behind the egress proxy and committed; then what
 * the setup left in `/workspace` written into the run's workspace, which becomes the baseline.
 *
 * The container. One container of the run's image, root file system writable, the pre-setup
 * workspace copied into its `/workspace` (owned by root), kept up by `sh -c 'read -r _'` (so the
 * image needs `sh`), on the run's internal network with the proxy as its only peer. Each command
 * runs in it with `docker exec`, in order, as uid 0 with every capability dropped; the proxy
 * variables and the credential placeholders are given to each exec, never to the container, so
 * they are not in the committed image's configuration. The credentials are the operator's
 * (core/egress.ts): the run names them, and the operator's file, read again now, says which
 * variable, header and hosts each has; a name it no longer allows fails the setup before any
 * container starts. After the last command the container is stopped and committed (user,
 * command and environment as the sandbox's), and tagged once its products are checked.
 *
 * Before the first command, the isolation probe runs with the setup's settings on the same
 * network: the proxy must be reachable, the host's addresses not (setup-phase evidence).
 *
 * Idempotent: a done setup is recorded in the control folder (`setup.json`) and returned again; a
 * retried attempt starts over from the pre-setup workspace (products.ts) and a fresh container.
 */
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import type Dockerode from 'dockerode';
import type { EgressSpec, IsolationEvidence, SetupSpec } from '../../core/contracts';
import type { CredentialLookup, OperatorCredential } from '../../core/egress';
import { brief } from '../../core/transcript';
import { writeFileAtomic } from '../../host/files';
import { CappedSink, capturedResult, tailBytes } from '../backends/capped-output';
import {
  removeContainer,
  SANDBOX_ENV,
  SANDBOX_GID,
  SANDBOX_UID,
  setupOverride,
  type AttachedRun,
  type DockerBackend,
  type SetupNetwork,
} from '../backends/docker';
import { probeIsolation } from '../probe/isolation';
import { isolationRefusal } from '../../core/isolation';
import { BackendUnavailableError, type ExecResult } from '../backends/types';
import type { Limits } from '../../core/limits';
import { scrubSecret } from '../../core/secrets';
import { manifestDigest, type ManifestEntry, type RunPaths } from '../../workspace/workspace';
import { findSetupImage, setupInputs, setupKey, setupLabels, SETUP_REPOSITORY } from './cache';
import { applyProducts, dropPreSetup, keepPreSetup, restorePreSetup, SetupProductError, workspaceArchive } from './products';
import {
  createEgressNetwork,
  type EgressNetwork,
  PROXY_HOSTS_PATH,
  PROXY_TLS,
  ProxyStartError,
  startProxy,
  type RunningProxy,
} from './proxy';
import { filterRules, forbiddenRanges } from './ranges';
import { headerValueProblem, parseAccessLine, squidConfig, type ProxyCredential } from './squid';
import { within } from './timing';
import type { CommandRecord, EgressEvent, EgressReport, SetupCommon, SetupResult } from '../../core/activities';

/** Egress events a setup result, or a page of `egressPage`, carries (each is under 400 bytes of JSON). */
export const EGRESS_PAGE = 100;
/** Egress events kept for the trace; requests beyond are counted only (a setup that makes this many is an attack or a bug). */
export const MAX_EGRESS_EVENTS = 100_000;
/** Bytes of a failed command's output kept for the run's detail and trace. */
const TAIL_BYTES = 4 * 1024;

/** The operator's settings of the egress proxy (host/settings.ts). */
export interface ProxySettings {
  proxyImage: string;
  /** The engine network through which the proxy reaches upstream hosts. */
  upstreamNetwork: string;
  /** The hosts file the proxy resolves names from, or null (DNS). */
  hostsFile: string | null;
  /** PEM certificates an intercepting proxy trusts upstream besides the system's, or null. */
  upstreamCaFile: string | null;
  /** Ranges the operator opened (AGENT_EGRESS_OPEN_CIDRS): reachable although forbidden. */
  openCidrs: string[];
  /** Ports CONNECT may go to besides 443 (AGENT_EGRESS_CONNECT_PORTS). */
  connectPorts: number[];
}

export interface SetupEnvironment extends ProxySettings {
  /** The docker backend of the run's image (the worker's, or the run's own). */
  backend: DockerBackend;
  /** The operator's definitions of the credentials `egress` names, from its file as it is now. */
  credentialsFor: (egress: EgressSpec | null) => CredentialLookup;
  /** A worker variable's value (the credentials'), read now. */
  credential: (name: string) => string | undefined;
  limits: Limits;
  signal: AbortSignal;
  heartbeat: () => void;
}

/** The placeholder the sandbox sees in a credential's variable: the same shape everywhere, never the value. */
export const placeholder = (env: string) => `coding-agent-placeholder-${env.toLowerCase().replace(/_/g, '-')}`;

const marker = (paths: RunPaths) => join(paths.control, 'setup.json');
/** Every egress event of the setup, in order (the trace's are taken from here, a page at a time). */
const egressFile = (paths: RunPaths) => join(paths.control, 'egress.json');

/** Egress events from `offset` on, at most a page; none when the setup listed no more. */
export function egressPage(paths: RunPaths, offset: number): EgressEvent[] {
  if (!existsSync(egressFile(paths))) return [];
  return (JSON.parse(readFileSync(egressFile(paths), 'utf8')) as EgressEvent[]).slice(offset, offset + EGRESS_PAGE);
}
/** The host folder of the setup CA's certificate while the setup runs, and where its container sees it. */
const caFolder = (paths: RunPaths) => join(paths.control, 'setup-ca');
export const SETUP_CA_DIR = '/coding-agent-setup-ca';
/** The variables that point clients at the setup's authority: OpenSSL's (Python, curl), requests' and pip's, Node's, git's. */
const CA_VARIABLES = ['SSL_CERT_FILE', 'REQUESTS_CA_BUNDLE', 'PIP_CERT', 'CURL_CA_BUNDLE', 'NODE_EXTRA_CA_CERTS', 'GIT_SSL_CAINFO'];

export async function runSetup(env: SetupEnvironment, paths: RunPaths, setup: SetupSpec, egress: EgressSpec | null): Promise<SetupResult> {
  if (existsSync(marker(paths))) return JSON.parse(readFileSync(marker(paths), 'utf8')) as SetupResult;
  const heartbeat = setInterval(() => env.heartbeat(), 2000);
  try {
    return await setupOnce(env, paths, setup, egress);
  } finally {
    clearInterval(heartbeat);
  }
}

async function setupOnce(env: SetupEnvironment, paths: RunPaths, setup: SetupSpec, egress: EgressSpec | null): Promise<SetupResult> {
  const docker = env.backend.engine();
  const baseImage = await env.backend.imageId();
  await keepPreSetup(paths);
  const baseTree = manifestDigest(JSON.parse(readFileSync(join(paths.control, 'pre-setup-manifest.json'), 'utf8')) as ManifestEntry[]);
  const named = env.credentialsFor(egress);
  const credentials = named.ok ? named.credentials : [];
  const inputs = setupInputs(baseImage, baseTree, setup, egress, credentials);
  const key = setupKey(inputs);
  const report: EgressReport = { allowed: 0, denied: 0, events: [], rest: 0, omitted: 0 };
  const common = (): SetupCommon => ({ key, commands: [], egress: report, isolation: null });
  // loadRun checked the names; the operator may have changed the file since.
  if (!named.ok) return { ...common(), ok: false, reason: 'setup_failed', detail: named.detail };

  let result: SetupResult;
  const cached = await findSetupImage(docker, key);
  if (cached !== null) {
    result = await finish(docker, paths, { ...common(), ok: true, cached: true, image_id: cached, added: 0 }, env.limits.newFiles);
  } else {
    const ran = await new FreshSetup(
      env,
      docker,
      paths,
      { setup, egress, named: credentials, baseImage },
      key,
      setupLabels(key, inputs),
      report,
    ).run();
    if (!ran.ok) return ran;
    result = await finish(docker, paths, ran, env.limits.newFiles);
    if (result.ok) await docker.getImage(result.image_id).tag({ repo: SETUP_REPOSITORY, tag: key });
    else
      await docker
        .getImage(ran.image_id)
        .remove()
        .catch(() => undefined); // products refused: not a cache entry
  }
  // Crash window: a worker killed between the tag and the marker leaves an image its retry finds,
  // so that retry reports a cached setup (setup_cached, and no egress events of the first attempt).
  if (result.ok) {
    writeFileAtomic(marker(paths), JSON.stringify(result), { tmpDir: paths.tmp });
    await dropPreSetup(paths);
  }
  return result;
}

/** Writes the image's products into the workspace; a product the workspace may not take fails the setup. */
async function finish(
  docker: Dockerode,
  paths: RunPaths,
  done: Extract<SetupResult, { ok: true }>,
  newFiles: number,
): Promise<SetupResult> {
  try {
    const { added, workspace_digest } = await applyProducts(docker, done.image_id, paths, newFiles);
    return { ...done, added, workspace_digest };
  } catch (err) {
    if (!(err instanceof SetupProductError)) throw err;
    await restorePreSetup(paths);
    const { ok: _ok, cached: _c, image_id: _i, added: _a, workspace_digest: _w, ...common } = done;
    return { ...common, ok: false, reason: 'setup_failed', detail: err.message };
  }
}

type Ran = Extract<SetupResult, { ok: true }> | Extract<SetupResult, { ok: false }>;

/** A setup refused or failed on the way: its result, carried out of the steps below. */
class SetupStop {
  constructor(readonly result: Extract<SetupResult, { ok: false }>) {}
}

/**
 * One fresh setup: the operator's credentials read, the proxy started behind its filter, the
 * probe run with the setup's settings, the commands run in the run's container, the container
 * committed; everything it started removed at the end, whatever happened.
 */
class FreshSetup {
  private readonly commands: CommandRecord[] = [];
  private readonly events: EgressEvent[] = [];
  private secrets: string[] = [];
  private isolation: IsolationEvidence | null = null;
  /** What this setup started, removed at the end. */
  private proxy: RunningProxy | null = null;
  private container: Dockerode.Container | null = null;

  constructor(
    private readonly env: SetupEnvironment,
    private readonly docker: Dockerode,
    private readonly paths: RunPaths,
    private readonly spec: { setup: SetupSpec; egress: EgressSpec | null; named: OperatorCredential[]; baseImage: string },
    private readonly key: string,
    private readonly labels: Record<string, string>,
    private readonly report: EgressReport,
  ) {}

  private scrub = (text: string) => this.secrets.reduce((t, s) => scrubSecret(t, s), text);

  private stop(reason: 'setup_failed' | 'isolation_unverified', detail: string): SetupStop {
    const { key, commands, report: egress, isolation } = this;
    return new SetupStop({ ok: false, reason, detail, key, commands, egress, isolation });
  }

  async run(): Promise<Ran> {
    try {
      const credentials = this.credentials();
      const network = await createEgressNetwork(this.docker);
      try {
        const proxy = (this.proxy = await this.startProxy(network, credentials));
        const { mounts, execEnv } = this.clientEnvironment(proxy);
        const net = { network: network.name, proxy: proxy.address, env: execEnv };
        await this.probe(net, proxy, network);
        const container = await this.startContainer(net, mounts);
        await this.runCommands(container, execEnv);
        return await this.commit(container);
      } finally {
        await this.cleanUp(network);
      }
    } catch (err) {
      if (err instanceof SetupStop) return err.result;
      throw err;
    }
  }

  /** The real values: read now, from the worker's environment, and only handed to the proxy. */
  private credentials(): ProxyCredential[] {
    const credentials: ProxyCredential[] = [];
    for (const c of this.spec.named) {
      const value = this.env.credential(c.env);
      if (value === undefined)
        throw this.stop(
          'setup_failed',
          `egress credential ${c.name}: the worker has no variable ${c.env} (set it where the worker starts)`,
        );
      const problem = headerValueProblem(value);
      if (problem !== null)
        throw this.stop('setup_failed', `egress credential ${c.name}: the value of ${c.env} cannot be a ${c.header} header: ${problem}`);
      credentials.push({ hosts: c.hosts, header: c.header, value, plainHttp: c.plain_http === true });
    }
    this.secrets = credentials.map((c) => c.value);
    return credentials;
  }

  private async startProxy(network: EgressNetwork, credentials: ProxyCredential[]): Promise<RunningProxy> {
    const { env, docker, spec, report, events } = this;
    const hosts = env.hostsFile === null ? null : readFileSync(env.hostsFile, 'utf8');
    const intercept = spec.egress?.tls === 'intercept';
    const upstreamCa = intercept && env.upstreamCaFile !== null ? readFileSync(env.upstreamCaFile, 'utf8') : null;
    // This machine's addresses and the engine's networks as they are now (the new internal network among them).
    const forbidden = await forbiddenRanges(docker);
    try {
      return await startProxy(docker, {
        image: env.proxyImage,
        network,
        upstream: env.upstreamNetwork,
        hosts,
        intercept: intercept ? { upstreamCa } : null,
        filter: filterRules({ clients: network.subnet, open: env.openCidrs, dns: env.hostsFile === null, forbidden }),
        config: (address) =>
          squidConfig({
            listen: address,
            clients: network.subnet,
            egress: spec.egress,
            credentials,
            forbidden,
            open: env.openCidrs,
            connectPorts: [...new Set([443, ...env.connectPorts])],
            hostsFile: env.hostsFile,
            hostsPath: PROXY_HOSTS_PATH,
            intercept: intercept ? { ...PROXY_TLS, upstreamCa: upstreamCa !== null ? PROXY_TLS.upstreamCa : null } : null,
          }),
        onRequest: (line) => {
          const event = parseAccessLine(this.scrub(line), intercept);
          if (event === null) return; // a connection that made no request (the probe's)
          if (event.allowed) report.allowed++;
          else report.denied++;
          if (events.length < MAX_EGRESS_EVENTS) events.push(event);
          else report.omitted++;
        },
      });
    } catch (err) {
      // It would fail alike on every attempt: an infrastructure failure, its log scrubbed of the values.
      if (err instanceof ProxyStartError)
        throw new BackendUnavailableError(
          err.log === '' ? err.message : `${err.message}: ${this.scrub(tailBytes(err.log, 2000))}`,
          'proxy_failed',
        );
      throw err;
    }
  }

  /** What every command gets: the proxy, the setup's authority when intercepting (mounted read-only, not in the image), the placeholders. */
  private clientEnvironment(proxy: RunningProxy): { mounts: Dockerode.MountSettings[]; execEnv: string[] } {
    const proxyUrl = `http://${proxy.address}:${proxy.port}`;
    const mounts: Dockerode.MountSettings[] = [];
    if (proxy.caCert !== null) {
      const folder = caFolder(this.paths);
      mkdirSync(folder, { recursive: true });
      writeFileSync(join(folder, 'ca.pem'), proxy.caCert, { mode: 0o644 });
      chmodSync(folder, 0o755);
      mounts.push({ Type: 'bind', Source: folder, Target: SETUP_CA_DIR, ReadOnly: true });
    }
    const execEnv = [
      ...['http_proxy', 'https_proxy', 'HTTP_PROXY', 'HTTPS_PROXY'].map((n) => `${n}=${proxyUrl}`),
      ...(proxy.caCert !== null ? CA_VARIABLES.map((n) => `${n}=${SETUP_CA_DIR}/ca.pem`) : []),
      ...this.spec.named.map((c) => `${c.env}=${placeholder(c.env)}`),
    ];
    return { mounts, execEnv };
  }

  /** The probe sees what a setup command sees: the same settings, network and variables. */
  private async probe(net: SetupNetwork, proxy: RunningProxy, network: EgressNetwork): Promise<void> {
    const probe = await probeIsolation(this.env.backend.withOverride(setupOverride(net)), {
      signal: this.env.signal,
      setup: { proxy: [proxy.address, proxy.port], hosts: network.gateway ? [network.gateway] : [], secrets: this.secrets },
    });
    this.isolation = {
      ...probe,
      checks: Object.fromEntries(Object.entries(probe.checks).map(([k, c]) => [k, { ok: c.ok, detail: this.scrub(c.detail) }])),
    };
    if (!this.isolation.verified) throw this.stop('isolation_unverified', `setup phase: ${isolationRefusal(this.isolation)}`);
  }

  /** The run's container: the sandbox's variables only; the setup's are given to each exec. */
  private async startContainer(net: SetupNetwork, mounts: Dockerode.MountSettings[]): Promise<Dockerode.Container> {
    const keeper = this.env.backend.withOverride({ ...setupOverride(net), env: [...SANDBOX_ENV] });
    const container = (this.container = await keeper.create(['sh', '-c', 'read -r _'], mounts, this.spec.baseImage, {
      keepStdinOpen: true,
    }));
    await container.putArchive(workspaceArchive(this.paths), { path: '/' });
    try {
      await container.start();
    } catch (err) {
      if (/executable file not found|no such file or directory/.test((err as Error).message ?? ''))
        throw this.stop('setup_failed', `the image has no sh, which keeps the setup's container up between its commands`);
      throw err;
    }
    return container;
  }

  private async runCommands(container: Dockerode.Container, execEnv: string[]): Promise<void> {
    const { setup } = this.spec;
    const until = Date.now() + setup.timeout_s * 1000;
    for (const argv of setup.commands) {
      const run = await runExec(this.docker, container, argv, execEnv, {
        argv,
        timeoutMs: Math.max(1, until - Date.now()),
        outputCapBytes: this.env.limits.execOutputBytes,
        signal: this.env.signal,
        onProgress: this.env.heartbeat,
      });
      const record: CommandRecord = { argv: argv.map((a) => brief(a) as string), exit_code: run.exitCode, timed_out: run.timedOut };
      this.commands.push(record);
      if (run.cancelled) throw new Error('the setup was cancelled');
      if (run.exitCode === 0) continue;
      record.output_tail = this.scrub(tailBytes(run.stdout + (run.stderr ? `\n${run.stderr}` : ''), TAIL_BYTES));
      const why = run.timedOut ? `timed out (setup.timeout_s ${setup.timeout_s} s for all commands)` : `exited ${run.exitCode}`;
      const shown = argv.join(' ');
      throw this.stop(
        'setup_failed',
        `setup command ${JSON.stringify(shown.length > 200 ? `${shown.slice(0, 200)}...` : shown)} ${why}: ${tailBytes(record.output_tail, 1500)}`,
      );
    }
  }

  /** The sandbox's user and command; the environment is the container's, which holds only the sandbox's variables. */
  private async commit(container: Dockerode.Container): Promise<Ran> {
    await container.kill({ signal: 'SIGKILL' }).catch(() => undefined);
    await container.wait({ condition: 'not-running' });
    const committed = (await container.commit({
      comment: `coding-agent setup ${this.key}`,
      changes: [
        `USER ${SANDBOX_UID}:${SANDBOX_GID}`,
        'CMD ["/bin/sh"]',
        ...Object.entries(this.labels).map(([k, v]) => `LABEL ${JSON.stringify(k)}=${JSON.stringify(v)}`),
      ],
    })) as { Id: string };
    const { key, commands, report: egress, isolation } = this;
    return { ok: true, cached: false, image_id: committed.Id, added: 0, key, commands, egress, isolation };
  }

  /** The proxy's last lines count: `report` is the object every result holds. */
  private async cleanUp(network: EgressNetwork): Promise<void> {
    try {
      if (this.container) await removeContainer(this.container);
      if (this.proxy) await this.proxy.stop();
      writeFileAtomic(egressFile(this.paths), JSON.stringify(this.events), { tmpDir: this.paths.tmp });
      this.report.events = this.events.slice(0, EGRESS_PAGE);
      this.report.rest = this.events.length - this.report.events.length;
    } finally {
      rmSync(caFolder(this.paths), { recursive: true, force: true });
      await network.remove();
    }
  }
}

/**
 * One command in the running container (`docker exec`): output drained and capped, a timeout and
 * a cancellation that kill the container (the setup fails then, so nothing of it is kept).
 */
async function runExec(
  docker: Dockerode,
  container: Dockerode.Container,
  argv: string[],
  env: string[],
  spec: AttachedRun,
): Promise<ExecResult> {
  const stdoutSink = new CappedSink(spec.outputCapBytes);
  const stderrSink = new CappedSink(spec.outputCapBytes);
  const exec = await container.exec({
    Cmd: argv,
    Env: env,
    User: '0:0',
    WorkingDir: '/workspace',
    AttachStdin: false,
    AttachStdout: true,
    AttachStderr: true,
    Tty: false,
  });
  const stream = await exec.start({ hijack: true, stdin: false });
  const out = new PassThrough();
  const err = new PassThrough();
  out.on('data', (b: Buffer) => stdoutSink.output.push(b));
  err.on('data', (b: Buffer) => stderrSink.output.push(b));
  docker.modem.demuxStream(stream, out, err);
  const streamEnded = new Promise<void>((resolve) => {
    stream.on('end', resolve);
    stream.on('close', resolve);
    stream.on('error', () => resolve());
  });
  let timedOut = false;
  let cancelled = false;
  const kill = () => void container.kill({ signal: 'SIGKILL' }).catch(() => undefined);
  const onAbort = () => {
    cancelled = true;
    kill();
  };
  const timer = setTimeout(() => {
    timedOut = true;
    kill();
  }, spec.timeoutMs);
  spec.signal.addEventListener('abort', onAbort, { once: true });
  if (spec.signal.aborted) onAbort();
  try {
    // The exec ends when its process does; a child it left holding the output keeps the stream
    // open, so the process's end (polled) with a short grace decides.
    for (;;) {
      const ended = await within(
        streamEnded.then(() => true),
        500,
        false,
      );
      spec.onProgress?.();
      if (ended) break;
      const state = await exec.inspect();
      if (!state.Running) {
        await within(streamEnded, 2000, undefined);
        break;
      }
    }
    const info = await exec.inspect();
    return capturedResult(info.ExitCode ?? null, { timedOut, cancelled }, stdoutSink.output, stderrSink.output);
  } finally {
    clearTimeout(timer);
    spec.signal.removeEventListener('abort', onAbort);
    (stream as unknown as { destroy?: () => void }).destroy?.();
  }
}
