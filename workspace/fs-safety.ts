/**
 * The file-system half of path safety. Every component of a path is checked with lstat from the
 * workspace root down: a symlink anywhere on the path is denied (never followed), and so is a
 * file with more than one hard link, since its bytes could be shared with a file outside.
 */
import { lstatSync, type Stats } from 'node:fs';
import { join } from 'node:path';

export type Resolved =
  | { ok: true; abs: string; stat: Stats | null } // stat null: the final component does not exist
  | { ok: false; error: 'path_denied' | 'not_found'; reason: string };

function lstatOrNull(abs: string): Stats | null {
  try {
    return lstatSync(abs);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err; // EACCES, EIO...: an infrastructure failure, never "not found"
  }
}

/**
 * Resolves a normalised repo-relative path. A missing final component is reported with
 * `stat: null` so callers can create it; a missing parent is `not_found`.
 */
export function resolveInWorkspace(root: string, relPath: string): Resolved {
  const segments = relPath === '' ? [] : relPath.split('/');
  let abs = root;
  for (let i = 0; i < segments.length; i++) {
    abs = join(abs, segments[i]);
    const stat = lstatOrNull(abs);
    const last = i === segments.length - 1;
    if (stat === null) {
      return last
        ? { ok: true, abs, stat: null }
        : { ok: false, error: 'not_found', reason: `${segments.slice(0, i + 1).join('/')} does not exist` };
    }
    if (stat.isSymbolicLink())
      return { ok: false, error: 'path_denied', reason: `${segments.slice(0, i + 1).join('/')} is a symbolic link` };
    if (!last && !stat.isDirectory())
      return { ok: false, error: 'not_found', reason: `${segments.slice(0, i + 1).join('/')} is not a folder` };
    if (last) {
      if (stat.isFile() && stat.nlink > 1) return { ok: false, error: 'path_denied', reason: `${relPath} has ${stat.nlink} hard links` };
      if (!stat.isFile() && !stat.isDirectory())
        return { ok: false, error: 'path_denied', reason: `${relPath} is not a regular file or folder` };
      return { ok: true, abs, stat };
    }
  }
  return { ok: true, abs: root, stat: lstatSync(root) };
}
