/**
 * git inside a container, for every repository the user has not trusted on the local backend:
 * one throwaway container of the git image (docker/build-git-image.sh) per reading, the
 * repository mounted read-only at /repo, each git command a `docker exec` in it whose output
 * streams back to the host's parser (workspace/git.ts), which reads it as hostile.
 *
 * The container has no network, no capability, no secret (its environment is fixed here), a
 * non-root user, a read-only root with a small /tmp (where scratch repositories go), limits on
 * processes, memory and CPU, and a life of at most `read_s` seconds (it runs `sleep` for that
 * long, so it ends by itself if this process dies first; the reaper removes it). Whatever the
 * repository's configuration makes git run (a fetch through a promisor remote, a command of an
 * `ext::` remote, a filter) runs in there, as that user, and leaves nothing when it is removed.
 *
 * Hazards: an exec cannot be stopped on its own, so a command past its idle or total limit kills
 * the whole container; every later command of this reading then fails with the same error.
 */
import { randomUUID } from 'node:crypto';
import type { Duplex } from 'node:stream';
import type Dockerode from 'dockerode';
import {
  CommandWatch,
  exitError,
  GitError,
  gitEnv,
  hostGit,
  outputCollector,
  type GitIO,
  type GitRunner,
  type RepositoryLimits,
} from '../workspace/git';
import { engineError, ownerLabel, removeContainer, SANDBOX_GID, SANDBOX_LABEL, SANDBOX_UID } from './backends/docker';

export const GIT_LABEL_VALUE = 'git';
const REPO = '/repo';
const PATH = '/usr/local/bin:/usr/bin:/bin';

/** What a reading container may use (fixed: a repository has no say in it). */
export const GIT_SANDBOX_LIMITS = {
  memoryBytes: 1024 * 1024 * 1024,
  tmpfsMiB: 512,
  pids: 64,
  nanoCpus: 1_000_000_000,
};

/**
 * Thrown when no reading container can be made: no engine, or no git image. An untrusted
 * repository is then refused, never read on the host.
 */
export class GitSandboxUnavailable extends Error {
  override name = 'GitSandboxUnavailable';
}

export async function sandboxGit(
  docker: Dockerode,
  o: { image: string; hostPath: string; limits: Pick<RepositoryLimits, 'idle_s' | 'read_s'> },
): Promise<GitRunner> {
  let container: Dockerode.Container;
  try {
    container = await docker.createContainer({
      name: `coding-agent-git-${randomUUID()}`,
      Image: o.image,
      Cmd: ['sleep', String(o.limits.read_s)],
      Entrypoint: [],
      User: `${SANDBOX_UID}:${SANDBOX_GID}`,
      WorkingDir: '/tmp',
      Hostname: 'reader',
      Env: [`PATH=${PATH}`, 'HOME=/tmp', 'LANG=C.UTF-8'],
      Labels: { [SANDBOX_LABEL]: GIT_LABEL_VALUE, ...ownerLabel() },
      Tty: false,
      HostConfig: {
        NetworkMode: 'none',
        ReadonlyRootfs: true,
        Privileged: false,
        Tmpfs: { '/tmp': `rw,nosuid,nodev,size=${GIT_SANDBOX_LIMITS.tmpfsMiB}m` },
        CapDrop: ['ALL'],
        CapAdd: [],
        SecurityOpt: ['no-new-privileges'],
        PidsLimit: GIT_SANDBOX_LIMITS.pids,
        Memory: GIT_SANDBOX_LIMITS.memoryBytes,
        MemorySwap: GIT_SANDBOX_LIMITS.memoryBytes,
        NanoCpus: GIT_SANDBOX_LIMITS.nanoCpus,
        IpcMode: 'private',
        LogConfig: { Type: 'none', Config: {} },
        Mounts: [{ Type: 'bind', Source: o.hostPath, Target: REPO, ReadOnly: true }],
        AutoRemove: false,
      },
    });
  } catch (err) {
    throw unavailable(err, o.image);
  }
  try {
    await container.start();
  } catch (err) {
    await removeContainer(container).catch(() => undefined);
    throw unavailable(err, o.image);
  }
  let broken: Error | null = null;
  let scratches = 0;
  const deadline = setTimeout(() => {
    broken ??= new GitError('timeout', `reading the repository took more than ${o.limits.read_s} s (AGENT_REPOSITORY_LIMITS.read_s)`);
    void container.kill({ signal: 'SIGKILL' }).catch(() => undefined);
  }, o.limits.read_s * 1000);
  deadline.unref();

  const git = async (args: string[], io: GitIO = {}): Promise<Buffer> => {
    if (broken) throw broken;
    const env = gitEnv({ path: PATH, safeDirectory: true, extra: io.env });
    let exec: Dockerode.Exec;
    let stream: Duplex;
    try {
      exec = await container.exec({
        Cmd: ['git', ...args],
        Env: Object.entries(env).map(([k, v]) => `${k}=${v}`),
        WorkingDir: io.inRepository ? REPO : '/tmp',
        AttachStdin: true,
        AttachStdout: true,
        AttachStderr: true,
        Tty: false,
      });
      stream = (await exec.start({ hijack: true, stdin: true })) as Duplex;
    } catch (err) {
      throw broken ?? engineError(err);
    }
    let failed: Error | null = null;
    const watch = new CommandWatch(args, io.idleMs === undefined ? o.limits.idle_s * 1000 : io.idleMs, o.limits.read_s * 1000, (err) => {
      // An exec cannot be stopped alone: the reading ends here.
      failed ??= err;
      broken ??= err;
      void container.kill({ signal: 'SIGKILL' }).catch(() => undefined);
      stream.destroy();
    });
    let stderr = '';
    const out = outputCollector(args, io);
    // The engine's frames, split into stdout (to the reader) and stderr (kept for the error).
    const frames = new Demux((chunk) => {
      watch.alive();
      if (stderr.length < 64 * 1024) stderr += chunk.toString('utf8');
    });
    stream.on('error', () => undefined); // a killed container's stream: the watch says why
    stream.end(io.input ?? '');
    await watch.read(frames.stdout(stream), out);
    watch.stop();
    if (failed) throw failed;
    if (broken) throw broken;
    const code = await exitCode(exec);
    if (code !== 0) throw exitError(args, code, stderr);
    return out.result();
  };

  return {
    kind: 'sandbox',
    root: REPO,
    git: (args, io) => git(args, io).catch((err: unknown) => Promise.reject(err instanceof GitError ? err : engineError(err))),
    scratch: async () => `/tmp/scratch-${++scratches}`,
    close: async () => {
      clearTimeout(deadline);
      await removeContainer(container);
    },
  };
}

/** An exec's exit code, once the engine has it (the stream may end a moment before). */
async function exitCode(exec: Dockerode.Exec): Promise<number | null> {
  for (let i = 0; i < 50; i++) {
    const info = (await exec.inspect()) as { Running: boolean; ExitCode: number | null };
    if (!info.Running) return info.ExitCode;
    await new Promise((r) => setTimeout(r, 20));
  }
  return null;
}

function unavailable(err: unknown, image: string): Error {
  const e = engineError(err) as Error & { statusCode?: number; detail?: string };
  if (e.name === 'BackendUnavailableError')
    return new GitSandboxUnavailable(`no docker engine to read the repository in (${e.message.split(':')[0]})`);
  if (e.statusCode === 404)
    return new GitSandboxUnavailable(`no image ${image} to read the repository in; build it with docker/build-git-image.sh`);
  return e;
}

/**
 * The engine's multiplexed stream (an 8-byte header per frame: stream, 0, 0, 0, length), split
 * into stdout (yielded as it comes) and stderr (handed to `onStderr`).
 */
class Demux {
  private header = Buffer.alloc(8);
  private headerFill = 0;
  private left = 0;
  private kind = 1;

  constructor(private readonly onStderr: (chunk: Buffer) => void) {}

  async *stdout(stream: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
    for await (const chunk of stream) {
      let at = 0;
      while (at < chunk.length) {
        if (this.left === 0) {
          const n = Math.min(8 - this.headerFill, chunk.length - at);
          chunk.copy(this.header, this.headerFill, at, at + n);
          this.headerFill += n;
          at += n;
          if (this.headerFill < 8) break;
          this.headerFill = 0;
          this.kind = this.header[0];
          this.left = this.header.readUInt32BE(4);
          continue;
        }
        const n = Math.min(this.left, chunk.length - at);
        const piece = chunk.subarray(at, at + n);
        this.left -= n;
        at += n;
        if (this.kind === 1) yield piece;
        else if (this.kind === 2) this.onStderr(piece);
      }
    }
  }
}
/** Where a repository is read: `host` only for one the user trusts on the local backend. */
export type RepositoryRead = 'host' | 'sandbox';

/**
 * The runners of one process: the machine's git for `host`, a reading container of `image` on
 * `docker` for `sandbox` (no engine: a GitSandboxUnavailable saying what to do).
 */
export function repositoryRunners(o: {
  docker: Dockerode | null;
  image: string;
  /** The search path of the machine's git. */
  path: string;
  limits: RepositoryLimits;
}): (read: RepositoryRead) => (hostPath: string) => Promise<GitRunner> {
  return (read) => async (hostPath) => {
    if (read === 'host') return hostGit(hostPath, { path: o.path, idleMs: o.limits.idle_s * 1000, totalMs: o.limits.read_s * 1000 });
    if (o.docker === null) throw new GitSandboxUnavailable('no docker engine is configured to read the repository in');
    return sandboxGit(o.docker, { image: o.image, hostPath, limits: o.limits });
  };
}

/** The one line an untrusted repository is refused with when it cannot be read in a sandbox. */
export function sandboxRefusal(err: GitSandboxUnavailable): string {
  return `${err.message}: a repository you have not trusted is read only in a sandbox; start a Docker engine (scripts/ensure-docker.sh builds the images), or run it on the local backend with --trust-repository if you trust its content`;
}
