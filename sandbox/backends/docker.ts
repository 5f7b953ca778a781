/**
 * The container backend: every exec runs in a fresh, throwaway container of the sandbox image
 * (docker/build-image.sh) with no network, a read-only root, no capabilities, a non-root user,
 * pid/memory/cpu limits, a largest file and a fixed environment. Only three host folders are
 * visible: the workspace (/workspace), the report folder (/out) and the acceptance files
 * (/acceptance, ro); what a process writes into the first two is bounded by sandbox/disk-bound.ts.
 *
 * `settings()` is the exact container configuration as plain JSON, so a run can record it and
 * `probeIsolation` (isolation.ts) can measure it through this same code path.
 */
import { randomUUID } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import { hostname } from 'node:os';
import Dockerode from 'dockerode';
import { DEFAULT_LIMITS as HARNESS_LIMITS } from '../../core/limits';
import { processAlive } from '../../host/processes';
import { offThread } from '../../workspace/thread';
import { CappedSink, capturedResult } from './capped-output';
import { BackendUnavailableError, type ExecBackend, type ExecResult, type ExecSpec } from './types';

export const SANDBOX_LABEL = 'coding-agent';
export const SANDBOX_LABEL_VALUE = 'sandbox';
/**
 * Which worker process created a container: `<hostname>:<pid>`. Kept out of `settings()` (and so
 * out of the recorded evidence); used only to find containers orphaned by a killed worker.
 */
export const OWNER_LABEL = 'coding-agent.owner';
const OWNER = `${hostname()}:${process.pid}`;
/** The owner label of whatever this process makes in the engine (containers, networks, images in progress). */
export const ownerLabel = (): Record<string, string> => ({ [OWNER_LABEL]: OWNER });
export const SANDBOX_UID = 10001;
export const SANDBOX_GID = 10001;

export const MOUNT_WORKSPACE = '/workspace';
export const MOUNT_OUT = '/out';
export const MOUNT_ACCEPTANCE = '/acceptance';

export interface DockerLimits {
  memoryBytes: number;
  pids: number;
  nanoCpus: number;
  tmpfsBytes: number;
  /**
   * The largest file a process may write (RLIMIT_FSIZE; a write past it fails with EFBIG): the
   * workspace limit (core/limits.ts `workspaceBytes`), so one file cannot outgrow the bound that
   * sandbox/disk-bound.ts measures, even between two measures.
   */
  fileBytes: number;
}

export const DEFAULT_LIMITS: DockerLimits = {
  memoryBytes: 512 * 1024 * 1024,
  pids: 128,
  nanoCpus: 1_000_000_000,
  tmpfsBytes: 64 * 1024 * 1024,
  fileBytes: HARNESS_LIMITS.workspaceBytes,
};

/** The environment of every sandboxed process; nothing is taken from the host. */
export const SANDBOX_ENV: readonly string[] = [
  'PATH=/usr/local/bin:/usr/bin:/bin',
  'HOME=/tmp',
  'LANG=C.UTF-8',
  'PYTHONDONTWRITEBYTECODE=1',
];

/** The host-config fields this backend sets; everything else is the engine's default. */
export interface SandboxHostConfig {
  NetworkMode: string;
  ReadonlyRootfs: boolean;
  Privileged: boolean;
  Tmpfs: Record<string, string>;
  CapDrop: string[];
  CapAdd: string[];
  SecurityOpt: string[];
  PidsLimit: number;
  Memory: number;
  MemorySwap: number;
  NanoCpus: number;
  IpcMode: string;
  Ulimits: { Name: string; Soft: number; Hard: number }[];
  LogConfig: { Type: string; Config: Record<string, string> };
}

/** The exact configuration of every sandbox container, minus the per-exec command and mounts. */
export interface ContainerSettings {
  image: string;
  user: string;
  workingDir: string;
  hostname: string;
  env: string[];
  labels: Record<string, string>;
  hostConfig: SandboxHostConfig;
  /** The only bind mounts (host folders come from the ExecSpec). No engine socket is mounted. */
  mounts: { target: string; readOnly: boolean | 'workspaceReadOnly'; when: 'always' | 'acceptanceDir' }[];
}

/**
 * A deviation from the defaults: a deliberate weakening that shows the isolation probe notices
 * it, or the setup phase's settings (`setupOverride`).
 */
export interface SettingsOverride {
  user?: string;
  env?: string[];
  /** `Binds` exists only to weaken a container on purpose (e.g. mount the engine socket). */
  hostConfig?: Partial<SandboxHostConfig> & { Binds?: string[]; Dns?: string[] };
}

/** Where a setup phase's container is: its internal network, and the proxy that is its only peer. */
export interface SetupNetwork {
  network: string;
  /** The proxy's address on that network. */
  proxy: string;
  /** The proxy variables and the credential placeholders, `NAME=value`. */
  env: string[];
}

/**
 * The setup phase's settings (SPEC section 11) on top of the sandbox's: the run's internal
 * network instead of none, the engine's resolver forwarding only to the proxy's address (which
 * answers no DNS, so no name resolves in the sandbox), a writable root file system (its changes
 * become the run's image) and uid 0, so that a setup can install into the image's prefixes. Every
 * capability stays dropped, so root here cannot change the owner of a file, override a file's
 * permissions, change uid or open raw sockets; no-new-privileges, seccomp and the limits stay.
 */
export function setupOverride(net: SetupNetwork): SettingsOverride {
  return {
    user: '0:0',
    env: [...SANDBOX_ENV, ...net.env],
    hostConfig: { NetworkMode: net.network, ReadonlyRootfs: false, Dns: [net.proxy] },
  };
}

export interface DockerBackendOptions {
  /** Image tag or content id; resolved once to the content id, which every container then uses. */
  image: string;
  docker?: Dockerode;
  limits?: Partial<DockerLimits>;
  /** How often `spec.onProgress` is called while the container runs. */
  progressIntervalMs?: number;
  override?: SettingsOverride;
}

/**
 * Engine errors that mean "nothing can run here", as opposed to a failure of one container.
 * Only connection-level errors count: an ENOENT of a missing workspace folder is not a missing
 * engine socket.
 */
function isEngineUnreachable(err: unknown): boolean {
  const e = err as NodeJS.ErrnoException | undefined;
  if (e?.code === 'ECONNRESET' || e?.code === 'EPIPE') return true;
  return e?.syscall === 'connect' && ['ECONNREFUSED', 'ENOENT', 'EACCES', 'ETIMEDOUT', 'EHOSTUNREACH'].includes(e.code ?? '');
}

/** `err`, or a BackendUnavailableError (`runtime_unavailable`) when it means the engine is unreachable. */
export function engineError(err: unknown): unknown {
  return isEngineUnreachable(err) ? unavailable(err) : err;
}

function statusCode(err: unknown): number | undefined {
  return (err as { statusCode?: number } | undefined)?.statusCode;
}

function unavailable(err: unknown): BackendUnavailableError {
  return new BackendUnavailableError(`docker engine unreachable: ${(err as Error)?.message ?? String(err)}`, 'runtime_unavailable');
}

/**
 * Hands a host folder tree to the sandbox uid for the duration of one exec (workspace/lend.ts,
 * in a workspace thread) and returns the function that gives it back.
 */
async function lend(root: string, to: { uid: number; gid: number }, onProgress?: () => void): Promise<() => Promise<void>> {
  const call = { key: root, onProgress };
  const owners = await offThread('lendTree', [root, to.uid, to.gid], call);
  return () => offThread('giveBackTree', [root, owners], call);
}

export class DockerBackend implements ExecBackend {
  readonly name = 'docker' as const;
  private readonly docker: Dockerode;
  private readonly limits: DockerLimits;
  private resolvedImage: Promise<string> | null = null;

  constructor(private readonly options: DockerBackendOptions) {
    this.docker = options.docker ?? new Dockerode();
    this.limits = { ...DEFAULT_LIMITS, ...options.limits };
  }

  /** The engine client this backend talks to (shared with `withOverride` copies). */
  engine(): Dockerode {
    return this.docker;
  }

  /** A backend identical to this one except for `override` (same engine, same image). */
  withOverride(override: SettingsOverride): DockerBackend {
    return new DockerBackend({ ...this.options, docker: this.docker, override });
  }

  /** The image's content id (`sha256:...`); resolved once, so every exec uses the same image. */
  imageId(): Promise<string> {
    if (!this.resolvedImage) {
      this.resolvedImage = this.docker
        .getImage(this.options.image)
        .inspect()
        .then((info) => info.Id)
        .catch((err: unknown) => {
          this.resolvedImage = null;
          if (isEngineUnreachable(err)) throw unavailable(err);
          if (statusCode(err) === 404) {
            throw new BackendUnavailableError(
              `sandbox image ${this.options.image} not found; build it with docker/build-image.sh`,
              'image_missing',
            );
          }
          throw err;
        });
    }
    return this.resolvedImage;
  }

  settings(): ContainerSettings {
    const l = this.limits;
    const o = this.options.override ?? {};
    return {
      image: this.options.image,
      user: o.user ?? `${SANDBOX_UID}:${SANDBOX_GID}`,
      workingDir: MOUNT_WORKSPACE,
      hostname: 'sandbox',
      env: [...(o.env ?? SANDBOX_ENV)],
      labels: { [SANDBOX_LABEL]: SANDBOX_LABEL_VALUE },
      hostConfig: {
        NetworkMode: 'none',
        ReadonlyRootfs: true,
        Privileged: false,
        Tmpfs: { '/tmp': `rw,nosuid,nodev,size=${Math.floor(l.tmpfsBytes / 1024 / 1024)}m` },
        CapDrop: ['ALL'],
        CapAdd: [],
        SecurityOpt: ['no-new-privileges'],
        PidsLimit: l.pids,
        Memory: l.memoryBytes,
        MemorySwap: l.memoryBytes, // equal to Memory: no swap on top
        NanoCpus: l.nanoCpus,
        IpcMode: 'private',
        Ulimits: [{ Name: 'fsize', Soft: l.fileBytes, Hard: l.fileBytes }],
        // No log driver: output is only streamed through the attach, never stored by the
        // engine, so a chatty process cannot fill the host disk.
        LogConfig: { Type: 'none', Config: {} },
        ...o.hostConfig,
      },
      mounts: [
        { target: MOUNT_WORKSPACE, readOnly: 'workspaceReadOnly', when: 'always' },
        { target: MOUNT_OUT, readOnly: false, when: 'always' },
        { target: MOUNT_ACCEPTANCE, readOnly: true, when: 'acceptanceDir' },
      ],
    };
  }

  /**
   * Removes what a worker process of this host that no longer exists left behind (killed between
   * create and remove): sandbox and setup containers, egress proxies, then the setup phases'
   * internal networks. Things of live processes, of other hosts and without an owner label are
   * never touched. Returns how many were removed.
   */
  async removeOrphans(): Promise<number> {
    const orphaned = (labels: Record<string, string> | undefined) => {
      const owner = labels?.[OWNER_LABEL] ?? '';
      const sep = owner.lastIndexOf(':');
      const pid = Number(owner.slice(sep + 1));
      if (sep < 0 || owner.slice(0, sep) !== hostname() || !Number.isInteger(pid) || pid <= 0) return false;
      return pid !== process.pid && !processAlive(pid);
    };
    let containers: Dockerode.ContainerInfo[];
    let networks: Dockerode.NetworkInspectInfo[];
    try {
      containers = await this.docker.listContainers({ all: true, filters: { label: [SANDBOX_LABEL] } });
      networks = await this.docker.listNetworks({ filters: { label: [`${SANDBOX_LABEL}=egress`] } });
    } catch (err) {
      throw engineError(err);
    }
    let removed = 0;
    for (const info of containers) {
      if (!['sandbox', 'proxy', 'git'].includes(info.Labels?.[SANDBOX_LABEL] ?? '') || !orphaned(info.Labels)) continue;
      await removeContainer(this.docker.getContainer(info.Id));
      removed++;
    }
    for (const info of networks) {
      if (!orphaned(info.Labels)) continue;
      try {
        await this.docker.getNetwork(info.Id).remove();
        removed++;
      } catch (err) {
        if ((err as { statusCode?: number }).statusCode !== 404) throw engineError(err);
      }
    }
    return removed;
  }

  async exec(spec: ExecSpec): Promise<ExecResult> {
    if (spec.argv.some((a) => a.includes('{acceptance}')) && spec.acceptanceDir === undefined) {
      throw new Error('argv uses {acceptance} but the ExecSpec has no acceptanceDir');
    }
    const image = await this.imageId();
    const argv = spec.argv.map((a) => a.replaceAll('{out}', MOUNT_OUT).replaceAll('{acceptance}', MOUNT_ACCEPTANCE));
    const mounts: Dockerode.MountSettings[] = [
      { Type: 'bind', Source: spec.workspaceDir, Target: MOUNT_WORKSPACE, ReadOnly: spec.workspaceReadOnly },
      { Type: 'bind', Source: spec.outDir, Target: MOUNT_OUT, ReadOnly: false },
    ];
    if (spec.acceptanceDir !== undefined) {
      mounts.push({ Type: 'bind', Source: spec.acceptanceDir, Target: MOUNT_ACCEPTANCE, ReadOnly: true });
    }
    await mkdir(spec.outDir, { recursive: true });

    // Handed to the user the container runs as (the sandbox's; root in a setup phase's probe).
    const [uid, gid] = this.settings().user.split(':').map(Number);
    const sandbox = Number.isInteger(uid) && Number.isInteger(gid) ? { uid, gid } : { uid: SANDBOX_UID, gid: SANDBOX_GID };
    const restores: (() => Promise<void>)[] = [];
    let container: Dockerode.Container | null = null;
    try {
      // The workspace is lent in both modes: read-only it must still be readable by the sandbox
      // uid (a 0700 temp folder is not), and the read-only mount forbids writes and chmod.
      // The acceptance folder is shared between runs, so it is never lent (concurrent lend and
      // restore would race); it must be readable by others (o+rX).
      restores.push(await lend(spec.outDir, sandbox, spec.onProgress));
      restores.push(await lend(spec.workspaceDir, sandbox, spec.onProgress));
      container = await this.create(argv, mounts, image);
      return await runAttached(this.docker, container, spec, this.options.progressIntervalMs);
    } catch (err) {
      throw engineError(err);
    } finally {
      try {
        // The container must be gone before ownership is given back (see lendTree).
        if (container) await removeContainer(container);
      } finally {
        for (const restore of restores.reverse()) await restore();
      }
    }
  }

  /**
   * A container of `image` with exactly this backend's settings, `argv` as its command and the
   * given bind mounts (the only host folders it sees), labelled with its owner for the reaper.
   */
  async create(
    argv: string[],
    mounts: Dockerode.MountSettings[],
    image: string,
    o: { keepStdinOpen?: boolean } = {},
  ): Promise<Dockerode.Container> {
    const s = this.settings();
    return this.docker.createContainer({
      name: `coding-agent-${randomUUID()}`,
      Image: image,
      Cmd: argv,
      Entrypoint: [],
      User: s.user,
      WorkingDir: s.workingDir,
      Hostname: s.hostname,
      Env: s.env,
      Labels: { ...s.labels, [OWNER_LABEL]: OWNER },
      Tty: false,
      // Open and never written: a shell's `read` then waits for as long as the container should run.
      OpenStdin: o.keepStdinOpen === true,
      AttachStdin: false,
      AttachStdout: true,
      AttachStderr: true,
      HostConfig: { ...s.hostConfig, Mounts: mounts, AutoRemove: false },
    });
  }
}

/** What `runAttached` needs of an exec: the command (for its errors), bounds, cancellation, progress. */
export type AttachedRun = Pick<ExecSpec, 'argv' | 'timeoutMs' | 'outputCapBytes' | 'signal' | 'onProgress'>;

/**
 * Starts a created container and follows it to its end: output drained continuously and capped,
 * a timeout and a cancellation that kill it, progress reported while it runs. The caller removes
 * the container.
 */
export async function runAttached(
  docker: Dockerode,
  container: Dockerode.Container,
  spec: AttachedRun,
  progressIntervalMs = 2000,
): Promise<ExecResult> {
  const stdoutSink = new CappedSink(spec.outputCapBytes);
  const stderrSink = new CappedSink(spec.outputCapBytes);
  const stdout = stdoutSink.output;
  const stderr = stderrSink.output;
  // Attach before start, so not a byte of output is missed.
  const stream = await container.attach({ stream: true, stdout: true, stderr: true });
  const streamEnded = new Promise<void>((resolve) => {
    stream.on('end', resolve);
    stream.on('close', resolve);
    stream.on('error', () => resolve());
  });
  docker.modem.demuxStream(stream, stdoutSink, stderrSink);

  let timedOut = false;
  let cancelled = false;
  let progressError: unknown = null;
  const kill = () => {
    container.kill({ signal: 'SIGKILL' }).catch((err: unknown) => {
      // 404/409: already gone or not running; the wait below then ends by itself.
      if (statusCode(err) !== 404 && statusCode(err) !== 409) progressError ??= err;
    });
  };
  const onAbort = () => {
    cancelled = true;
    kill();
  };
  let timer: NodeJS.Timeout | undefined;
  let progress: NodeJS.Timeout | undefined;
  try {
    if (spec.signal.aborted) return cancelledBeforeStart();
    try {
      await container.start();
    } catch (err) {
      throw startError(err, spec.argv[0]);
    }
    // Armed only once started: a kill sent before the start would be refused (409) and the
    // process would then run with no deadline.
    timer = setTimeout(() => {
      timedOut = true;
      kill();
    }, spec.timeoutMs);
    progress = setInterval(() => {
      try {
        spec.onProgress?.();
      } catch (err) {
        progressError ??= err;
        kill();
      }
    }, progressIntervalMs);
    spec.signal.addEventListener('abort', onAbort, { once: true });
    if (spec.signal.aborted) onAbort();
    // 'not-running' after start: a process that already exited is reported at once.
    const { StatusCode } = (await container.wait({ condition: 'not-running' })) as { StatusCode: number };
    // The exit is reported before the attach stream has delivered its last frames. Output
    // whose stream does not end is not known to be whole, so it is marked as cut.
    let grace: NodeJS.Timeout | undefined;
    const ended = await Promise.race([
      streamEnded.then(() => true),
      new Promise<boolean>((r) => (grace = setTimeout(() => r(false), 5000))),
    ]);
    clearTimeout(grace);
    if (!ended) stdout.truncated = stderr.truncated = true;
    if (progressError) throw progressError;
    // The engine reports a signal death of the main process as 128+n, like a shell. The one
    // case told apart is the OOM kill of the main process (OOMKilled is also set when only a
    // child was OOM-killed, so it alone does not mean the main process died).
    const oomKilled = !timedOut && !cancelled && StatusCode === 137 && (await container.inspect()).State.OOMKilled === true;
    return capturedResult(oomKilled ? null : StatusCode, { timedOut, cancelled }, stdout, stderr);
  } finally {
    clearTimeout(timer);
    clearInterval(progress);
    spec.signal.removeEventListener('abort', onAbort);
    (stream as unknown as { destroy?: () => void }).destroy?.();
  }
}

function cancelledBeforeStart(): ExecResult {
  return {
    exitCode: null,
    timedOut: false,
    cancelled: true,
    stdout: '',
    stderr: '',
    stdoutTruncated: false,
    stderrTruncated: false,
  };
}

/**
 * A start failure of the engine. The engine reports a missing executable only as message text
 * (OCI runtime error, HTTP 400/500), so that text is the one thing matched here; it maps to the
 * same `runtime_missing` the local backend uses for ENOENT.
 */
function startError(err: unknown, command: string): unknown {
  if (isEngineUnreachable(err)) return unavailable(err);
  const message = (err as Error)?.message ?? '';
  if (/exec: .*(executable file not found|no such file or directory)/.test(message)) {
    return new BackendUnavailableError(`command not found in the sandbox image: ${command}`, 'runtime_missing');
  }
  return err;
}

/** Removes a container and its anonymous volumes; one already gone is fine. */
export async function removeContainer(container: Dockerode.Container): Promise<void> {
  try {
    await container.remove({ force: true, v: true });
  } catch (err) {
    if (statusCode(err) === 404) return; // already removed
    throw engineError(err);
  }
}
