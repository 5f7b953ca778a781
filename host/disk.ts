/**
 * A full disk, told apart by code, never by message: `ENOSPC` (no space left), `EDQUOT` (a quota
 * reached) from the file system, and SQLite's `SQLITE_FULL` (its own word for either). Where it
 * happens decides who must free space, so each is named by its owner:
 *   `workspace`     a run's folder (`runs/<id>/`): its workspace and its control folder, which are
 *                   kept on one file system (the rename of a write's temporary file is atomic);
 *   `state folder`  everything else under the state folder: the ledger, the host store.
 *   `host`          a path outside both (a temporary folder of this machine).
 * Activities turn a DiskFullError into the `DiskFull` failure (activities/failures.ts), which
 * waits for space and then ends the run `disk_full` with this message.
 */
import { statfsSync } from 'node:fs';

/** `host`: a path outside both, such as a temporary folder of this machine. */
export type DiskOwner = 'workspace' | 'state folder' | 'host';

const FULL_CODES = new Set(['ENOSPC', 'EDQUOT', 'SQLITE_FULL']);

/** `ENOSPC`, `EDQUOT` or `SQLITE_FULL` when `err` says the disk is full, else null. */
export function diskFullCode(err: unknown): string | null {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && FULL_CODES.has(code) ? code : null;
}

export class DiskFullError extends Error {
  override name = 'DiskFullError';
  constructor(
    readonly owner: DiskOwner,
    /** What was being written, in words a user reads (no host path). */
    readonly place: string,
    readonly code: string,
  ) {
    super(`no space left on the file system of the ${owner} (${place}): ${code}`);
  }
}

/**
 * Runs `fn`; a full disk becomes a DiskFullError naming `owner` and `place` (a DiskFullError
 * already named stays as it is), any other error passes unchanged.
 */
export function onDisk<T>(owner: DiskOwner, place: string, fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    throw asDiskFull(err, owner, place);
  }
}

/** `err` as a DiskFullError of `owner` when it is a full disk; otherwise `err` itself. */
export function asDiskFull(err: unknown, owner: DiskOwner, place: string): unknown {
  if (err instanceof DiskFullError) return err;
  const code = diskFullCode(err);
  return code === null ? err : new DiskFullError(owner, place, code);
}

/** Bytes an unprivileged writer may still use on the file system of `path`. */
export function freeBytes(path: string): number {
  const s = statfsSync(path);
  return s.bavail * s.bsize;
}
