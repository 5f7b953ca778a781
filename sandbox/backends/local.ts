/**
 * The trusted-local backend: the process runs on the host with the host's rights, in its own
 * process group, with a minimal environment. A read-only workspace is honoured by running in a
 * throwaway copy, so an acceptance command cannot change the candidate workspace.
 *
 * Crash hazard: the group is detached from the worker, so a worker killed with SIGKILL leaves the
 * whole test tree running. Each running group is therefore recorded in a host-wide folder with
 * its owning worker, and every exec first reaps the groups whose owner is dead (see
 * ProcessGroups). A group whose owner is alive is never touched.
 */
import { groupAlive, HAS_PROC, identityOf, processAlive, procStat, type ProcessIdentity } from '../../host/processes';
import { writeFileAtomic } from '../../host/files';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { faultPoint } from '../../host/faults';
import { offThread } from '../../workspace/thread';
import { CappedOutput, capturedResult } from './capped-output';
import { BackendUnavailableError, type ExecBackend, type ExecResult, type ExecSpec } from './types';

function killGroup(pid: number | undefined): void {
  if (pid === undefined) return;
  try {
    process.kill(-pid, 'SIGKILL');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
  }
}

/** The environment variable that marks every process of a group this backend started. */
const GROUP_MARK = 'AGENT_EXEC_GROUP';

/** What the record file `<pgid>-<token>.json` holds while a group runs. */
interface GroupRecord {
  pgid: number;
  /** Carried in the environment of every process of the group as GROUP_MARK=<token>. */
  token: string;
  owner: ProcessIdentity;
  command: string;
}

/** Pids of the processes in group `pgid` whose environment carries GROUP_MARK=<token>. */
function markedMembers(pgid: number, token: string): number[] {
  const mark = Buffer.from(`${GROUP_MARK}=${token}\0`);
  const members: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name) || procStat(Number(name))?.pgid !== pgid) continue;
    try {
      const environ = readFileSync(`/proc/${name}/environ`);
      if (environ.indexOf(mark) !== -1) members.push(Number(name));
    } catch {
      // exited meanwhile, or not ours to read: not a member we may kill
    }
  }
  return members;
}

/** A record's content, or null when it is not a whole record (torn by a machine crash). */
function wholeRecord(text: string): GroupRecord | null {
  try {
    const record = JSON.parse(text) as Partial<GroupRecord> | null;
    const whole =
      typeof record?.pgid === 'number' &&
      typeof record.token === 'string' &&
      typeof record.owner?.pid === 'number' &&
      typeof record.command === 'string';
    return whole ? (record as GroupRecord) : null;
  } catch {
    return null;
  }
}

/**
 * The host-wide record of the process groups the local backends of all workers have running.
 * A record is written right after the spawn and removed when the group has been ended. Reaping
 * kills a recorded group only when its owner is dead and a process of that group still carries
 * the record's token, so neither a reused worker pid nor a reused group id can make it kill a
 * stranger (a group id is not reused while any process of the group lives).
 */
export class ProcessGroups {
  private readonly owner = identityOf();

  constructor(readonly dir: string) {}

  /**
   * Records a group this process just started, whose processes carry GROUP_MARK=<token>. The
   * token is in the file name, so a record never replaces another group's, even one that
   * reused the same group id. Written whole (host/files.ts): a temporary file renamed into place,
   * so a reaper never reads half a record; the temporary file's name (a dot file) is one reaping
   * never reads. Not synced: a record matters only while the machine stays up (a machine crash
   * ends every group it names), and a sync costs each test process a few milliseconds of the
   * event loop (docs/benchmarks.md). A record torn by a machine crash is stale, and reaping
   * removes it.
   */
  add(pgid: number, token: string, command: string): void {
    this.ensureDir();
    const record: GroupRecord = { pgid, token, owner: this.owner, command };
    writeFileAtomic(this.file(pgid, token), JSON.stringify(record), { mode: 0o600, sync: false });
  }

  remove(pgid: number, token: string): void {
    rmSync(this.file(pgid, token), { force: true });
  }

  private file(pgid: number, token: string): string {
    return join(this.dir, `${pgid}-${token}.json`);
  }

  /** Kills the groups whose owning worker is dead; returns their group ids. */
  reapOrphans(): number[] {
    this.ensureDir();
    const reaped: number[] = [];
    for (const name of readdirSync(this.dir)) {
      if (!/^\d+-[0-9a-f-]+\.json$/.test(name)) continue;
      const file = join(this.dir, name);
      let text: string;
      try {
        text = readFileSync(file, 'utf8');
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue; // removed by its owner meanwhile
        throw err;
      }
      const record = wholeRecord(text);
      if (record === null) {
        // Renamed into place whole, so only a machine crash tears one; no group it named lives.
        rmSync(file, { force: true });
        continue;
      }
      if (processAlive(record.owner)) continue;
      if (!HAS_PROC) {
        // Without /proc the group cannot be told apart from a stranger that reused its id.
        if (!groupAlive(record.pgid)) rmSync(file, { force: true });
        continue;
      }
      if (markedMembers(record.pgid, record.token).length > 0) {
        killGroup(record.pgid);
        reaped.push(record.pgid);
      }
      rmSync(file, { force: true });
    }
    return reaped;
  }

  ensureDir(): void {
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    const stat = lstatSync(this.dir);
    // Records decide which processes get killed: the folder must be this user's own.
    if (!stat.isDirectory() || (process.getuid && stat.uid !== process.getuid())) {
      throw new Error(`process-group folder ${this.dir} is not a folder owned by this user`);
    }
  }
}

export interface LocalBackendOptions {
  /**
   * Folder of the running-group records, shared by every worker of this user on this host.
   * Default: `agent-process-groups-<uid>` under the OS temp folder.
   */
  processDir?: string;
  /** PATH of the processes it runs: the settings' PATH behind the tools environment (host/tools-env.ts hostPath). */
  path: string;
}

export function defaultProcessDir(): string {
  return join(tmpdir(), `agent-process-groups-${process.getuid?.() ?? 'user'}`);
}

export class LocalBackend implements ExecBackend {
  readonly name = 'local' as const;
  readonly groups: ProcessGroups;
  private readonly path: string;

  constructor(options: LocalBackendOptions) {
    this.groups = new ProcessGroups(options.processDir ?? defaultProcessDir());
    this.path = options.path;
  }

  async exec(spec: ExecSpec): Promise<ExecResult> {
    // A worker that died mid-test left its group running, possibly in this very workspace.
    this.groups.reapOrphans();
    let cwd = spec.workspaceDir;
    let snapshot: string | null = null;
    if (spec.workspaceReadOnly) {
      snapshot = mkdtempSync(join(spec.outDir, 'ro-'));
      await offThread('copyTree', [spec.workspaceDir, join(snapshot, 'workspace')], {
        key: spec.workspaceDir,
        onProgress: spec.onProgress,
      });
      cwd = join(snapshot, 'workspace');
    }
    const argv = spec.argv.map((a) => a.replaceAll('{out}', spec.outDir).replaceAll('{acceptance}', spec.acceptanceDir ?? '{acceptance}'));
    try {
      return await this.spawnCapped(argv, cwd, spec);
    } finally {
      if (snapshot) await offThread('remove', [snapshot], { key: spec.workspaceDir });
    }
  }

  private spawnCapped(argv: string[], cwd: string, spec: ExecSpec): Promise<ExecResult> {
    return new Promise((resolve, reject) => {
      const stdout = new CappedOutput(spec.outputCapBytes);
      const stderr = new CappedOutput(spec.outputCapBytes);
      let timedOut = false;
      let cancelled = false;
      const token = randomUUID();
      const child = spawn(argv[0], argv.slice(1), {
        cwd,
        detached: true, // own process group, so the whole tree can be killed
        stdio: ['ignore', 'pipe', 'pipe'],
        env: {
          PATH: this.path,
          HOME: spec.outDir,
          TMPDIR: spec.outDir,
          LANG: 'C.UTF-8',
          PYTHONDONTWRITEBYTECODE: '1',
          NO_COLOR: '1',
          [GROUP_MARK]: token,
        },
      });
      const pgid = child.pid;
      if (pgid !== undefined) {
        // Hazard: a SIGKILL between the spawn and this record leaves the group unrecorded. The
        // window is a few synchronous statements; a record written before the spawn could not
        // name the group.
        try {
          this.groups.add(pgid, token, argv[0]);
        } catch (err) {
          killGroup(pgid);
          reject(err);
          return;
        }
        if (!spec.workspaceReadOnly) faultPoint('during_tests');
      }
      child.stdout.on('data', (c: Buffer) => stdout.push(c));
      child.stderr.on('data', (c: Buffer) => stderr.push(c));
      const timer = setTimeout(() => {
        timedOut = true;
        killGroup(child.pid);
      }, spec.timeoutMs);
      const progress = setInterval(() => spec.onProgress?.(), 1000);
      const onAbort = () => {
        cancelled = true;
        killGroup(child.pid);
      };
      spec.signal.addEventListener('abort', onAbort, { once: true });
      if (spec.signal.aborted) onAbort();
      const cleanup = () => {
        clearTimeout(timer);
        clearInterval(progress);
        spec.signal.removeEventListener('abort', onAbort);
      };
      child.on('error', (err: NodeJS.ErrnoException) => {
        cleanup();
        if (err.code === 'ENOENT') reject(new BackendUnavailableError(`runtime not found: ${argv[0]}`, 'runtime_missing'));
        else reject(err);
      });
      // Children that outlive the parent would hold the pipes open: end the group on exit.
      child.on('exit', () => {
        killGroup(pgid);
        if (pgid !== undefined) this.groups.remove(pgid, token);
      });
      child.on('close', (code) => {
        cleanup();
        resolve(capturedResult(code, { timedOut, cancelled }, stdout, stderr));
      });
    });
  }
}
