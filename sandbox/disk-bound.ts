/**
 * A test or acceptance process kept within the run's disk share. Its writable folders (the
 * workspace, unless mounted read-only, and the report folder `{out}`) may hold at most
 * `limits.workspaceBytes` (or what the workspace held before, if that was more): the folders are
 * measured while it runs, at each progress tick of the backend, and after it; a process past the
 * bound is stopped like a timeout, and its changes are undone by the caller (byproducts.ts). The
 * docker backend also caps each file a container writes at the same size (RLIMIT_FSIZE), so a
 * single growing file stops at once rather than at the next tick.
 *
 * A process that found the disk full (the folders' file system has next to nothing left when it
 * ends) has no result to trust: that is a DiskFullError of the workspace, which waits for space
 * like every full disk (activities/failures.ts).
 *
 * Hazards: sizes are the files' lengths (a sparse file counts whole, which is stricter); links are
 * never followed; a large tree is measured less often (at most a tenth of the time is spent
 * measuring), so a fast writer can pass the bound by what it writes between two measures; the
 * file-system check runs before the undo, which may give space back.
 */
import { lstat, opendir } from 'node:fs/promises';
import { join } from 'node:path';
import { DiskFullError, freeBytes } from '../host/disk';
import type { ExecBackend, ExecResult, ExecSpec } from './backends/types';

/** Less than this left on the workspace's file system after a process means it found the disk full. */
export const FULL_BELOW_BYTES = 64 * 1024;

/** Which bound a process went past: the bytes of its folders, or the entries it added to them. */
export type OverLimit = { what: 'bytes'; bytes: number; limit: number } | { what: 'files'; added: number; limit: number };

export interface BoundedResult extends ExecResult {
  /** The process was stopped because its folders grew past a bound. */
  overLimit: OverLimit | null;
}

/**
 * The sizes of the regular files below `dir` (links not followed) and its entries (a file, a
 * folder, a link each); stops counting once either passes its `stop`. Folders are read a few
 * hundred entries at a time, so a folder of 400,000 names is never one array on the event loop,
 * and reading stops at the bound.
 */
export async function treeSize(dir: string, stop: { bytes: number; entries: number }): Promise<{ bytes: number; entries: number }> {
  const total = { bytes: 0, entries: 0 };
  const over = () => total.bytes > stop.bytes || total.entries > stop.entries;
  const walk = async (path: string): Promise<void> => {
    try {
      for await (const entry of await opendir(path, { bufferSize: 256 })) {
        if (over()) return; // leaving the loop closes the folder
        total.entries++;
        const child = join(path, entry.name);
        if (entry.isDirectory()) await walk(child);
        else if (entry.isFile()) {
          const st = await lstat(child).catch(() => null);
          if (st?.isFile()) total.bytes += st.size;
        }
      }
    } catch (err) {
      if (['ENOENT', 'ENOTDIR'].includes((err as NodeJS.ErrnoException).code ?? '')) return; // changed meanwhile
      throw err;
    }
  };
  await walk(dir);
  return total;
}

/**
 * Runs `spec` on `backend` within `limitBytes` (see the header) and `newFiles` entries more than
 * the `entriesBefore` its writable folders held; `bytesBefore` is what the workspace held.
 */
export async function execWithinDisk(
  backend: ExecBackend,
  spec: ExecSpec,
  o: { limitBytes: number; bytesBefore: number; newFiles: number; entriesBefore: number },
): Promise<BoundedResult> {
  const bound = Math.max(o.limitBytes, o.bytesBefore);
  const entriesBound = o.entriesBefore + o.newFiles;
  const folders = spec.workspaceReadOnly ? [spec.outDir] : [spec.workspaceDir, spec.outDir];
  const measure = async (): Promise<OverLimit | null> => {
    const total = { bytes: 0, entries: 0 };
    for (const dir of folders) {
      const size = await treeSize(dir, { bytes: bound - total.bytes, entries: entriesBound - total.entries });
      total.bytes += size.bytes;
      total.entries += size.entries;
    }
    if (total.bytes > bound) return { what: 'bytes', bytes: total.bytes, limit: bound };
    if (total.entries > entriesBound) return { what: 'files', added: total.entries - o.entriesBefore, limit: o.newFiles };
    return null;
  };
  const stop = new AbortController();
  const onAbort = () => stop.abort();
  spec.signal.addEventListener('abort', onAbort, { once: true });
  if (spec.signal.aborted) stop.abort();
  let overLimit: OverLimit | null = null;
  let measuring = false;
  let nextAt = 0;
  const tick = () => {
    spec.onProgress?.();
    if (measuring || overLimit !== null || Date.now() < nextAt) return;
    measuring = true;
    const started = Date.now();
    void measure()
      .then((over) => {
        if (over !== null && !spec.signal.aborted) {
          overLimit = over;
          stop.abort();
        }
      })
      .catch(() => undefined) // a tree changing under the walk is measured again at the next tick
      .finally(() => {
        measuring = false;
        nextAt = Date.now() + 9 * (Date.now() - started);
      });
  };
  let result: ExecResult;
  try {
    result = await backend.exec({ ...spec, signal: stop.signal, onProgress: tick });
  } finally {
    spec.signal.removeEventListener('abort', onAbort);
  }
  const free = freeBytes(spec.outDir);
  if (free < FULL_BELOW_BYTES)
    throw new DiskFullError('workspace', `a test or acceptance process: ${free} bytes were left when it ended`, 'ENOSPC');
  if (overLimit === null && !result.cancelled && !result.timedOut) overLimit = await measure();
  // Stopped for its size, not cancelled: the caller reports the limit.
  return overLimit !== null ? { ...result, cancelled: false, overLimit } : { ...result, overLimit };
}

/** What a run's tests or acceptance are told when their process wrote past the bound. */
export function overLimitDetail(over: OverLimit): string {
  if (over.what === 'files')
    return `too_large: the process left more than ${over.limit} new files and folders in the workspace and its report folder (${over.added} counted; AGENT_REPOSITORY_LIMITS.new_files): it was stopped and its changes undone`;
  return `the process wrote past the workspace limit (${over.bytes} bytes in the workspace and its report folder, over ${over.limit}: the workspace limit, limits.workspaceBytes): it was stopped and its changes undone`;
}
