/**
 * The trusted-local backend: the process runs on the host with the host's rights, in its own
 * process group, with a minimal environment. A read-only workspace is honoured by running in a
 * throwaway copy, so an acceptance command cannot change the candidate workspace.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { copyTree } from '../workspace';
import { BackendUnavailableError, type ExecBackend, type ExecResult, type ExecSpec } from './types';

/** Keeps the first `cap` bytes of a stream and counts the rest. */
class CappedBuffer {
  private chunks: Buffer[] = [];
  private size = 0;
  truncated = false;
  constructor(private readonly cap: number) {}
  push(chunk: Buffer): void {
    const room = this.cap - this.size;
    if (chunk.length > room) this.truncated = true;
    if (room > 0) {
      const kept = chunk.subarray(0, room);
      this.chunks.push(kept);
      this.size += kept.length;
    }
  }
  text(): string {
    return Buffer.concat(this.chunks).toString('utf8');
  }
}

function killGroup(pid: number | undefined): void {
  if (pid === undefined) return;
  try {
    process.kill(-pid, 'SIGKILL');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
  }
}

export class LocalBackend implements ExecBackend {
  readonly name = 'local' as const;

  async exec(spec: ExecSpec): Promise<ExecResult> {
    let cwd = spec.workspaceDir;
    let snapshot: string | null = null;
    if (spec.workspaceReadOnly) {
      snapshot = mkdtempSync(join(spec.outDir, 'ro-'));
      copyTree(spec.workspaceDir, join(snapshot, 'workspace'));
      cwd = join(snapshot, 'workspace');
    }
    const argv = spec.argv.map((a) =>
      a.replaceAll('{out}', spec.outDir).replaceAll('{acceptance}', spec.acceptanceDir ?? '{acceptance}'),
    );
    try {
      return await this.spawnCapped(argv, cwd, spec);
    } finally {
      if (snapshot) rmSync(snapshot, { recursive: true, force: true });
    }
  }

  private spawnCapped(argv: string[], cwd: string, spec: ExecSpec): Promise<ExecResult> {
    return new Promise((resolve, reject) => {
      const stdout = new CappedBuffer(spec.outputCapBytes);
      const stderr = new CappedBuffer(spec.outputCapBytes);
      let timedOut = false;
      let cancelled = false;
      const child = spawn(argv[0], argv.slice(1), {
        cwd,
        detached: true, // own process group, so the whole tree can be killed
        stdio: ['ignore', 'pipe', 'pipe'],
        env: {
          PATH: process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin',
          HOME: spec.outDir,
          TMPDIR: spec.outDir,
          LANG: 'C.UTF-8',
          PYTHONDONTWRITEBYTECODE: '1',
          NO_COLOR: '1',
        },
      });
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
      child.on('exit', () => killGroup(child.pid));
      child.on('close', (code) => {
        cleanup();
        resolve({
          exitCode: timedOut || cancelled ? null : code,
          timedOut,
          cancelled,
          stdout: stdout.text(),
          stderr: stderr.text(),
          stdoutTruncated: stdout.truncated,
          stderrTruncated: stderr.truncated,
        });
      });
    });
  }
}
