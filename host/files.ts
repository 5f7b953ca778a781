/**
 * Small files that must survive a crash whole: written to a temporary file, synced, renamed over
 * the target (or, exclusive, linked to it), and the folder synced, so a reader sees the old
 * content or the new, never a part.
 */
import { closeSync, fsyncSync, linkSync, mkdirSync, openSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { basename, dirname, join } from 'node:path';

export interface AtomicWriteOptions {
  /** Folder of the temporary file; it must be on the target's file system. Default: the target's folder. */
  tmpDir?: string;
  mode?: number;
  /**
   * Create only: fails with EEXIST when the target exists, and leaves it as it is. The temporary
   * file is hard-linked to the target instead of renamed over it, so of several writers exactly
   * one wins, and the target never exists without its whole content.
   */
  exclusive?: boolean;
  /**
   * false: not synced, for a record that matters only while this machine stays up (a machine crash
   * ends everything it names, as a running process group's record). A reader still sees it whole,
   * since it is renamed into place whole; only a machine crash can leave it torn, and its reader
   * must take a torn one for what it then is: stale. Default true.
   */
  sync?: boolean;
}

export function writeFileAtomic(path: string, data: string | Buffer, options: AtomicWriteOptions = {}): void {
  const tmpDir = options.tmpDir ?? dirname(path);
  mkdirSync(tmpDir, { recursive: true });
  const tag = createHash('sha256').update(path).digest('hex').slice(0, 16);
  const tmp = join(tmpDir, `.${basename(path)}.${tag}.${process.pid}.tmp`);
  // Created afresh, so the mode holds from its first byte (a leftover with wider rights is never reused).
  rmSync(tmp, { force: true });
  const fd = openSync(tmp, 'wx', options.mode ?? 0o644);
  try {
    writeFileSync(fd, data);
    if (options.sync !== false) fsyncSync(fd);
  } catch (err) {
    closeSync(fd);
    rmSync(tmp, { force: true });
    throw err;
  }
  closeSync(fd);
  if (options.exclusive) {
    try {
      linkSync(tmp, path);
    } finally {
      rmSync(tmp, { force: true });
    }
  } else {
    renameSync(tmp, path);
  }
  if (options.sync !== false) fsyncDir(dirname(path));
}

export function fsyncDir(dir: string): void {
  const fd = openSync(dir, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}
