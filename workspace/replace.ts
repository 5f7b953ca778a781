/**
 * The files of one approved action put in place as one: each new file is a synced temporary file
 * of the control folder renamed over its target, and each old file is kept by a hard link in the
 * control folder until the action's receipt is recorded. So an action that meets a full disk
 * halfway (the temporary file, a rename, the receipt) is put back whole: every target as it was.
 *
 * Hazards: a kept link is a second hard link of the old file, which path safety refuses
 * (fs-safety.ts); `clear` removes an earlier attempt's links before the targets are looked at.
 * A worker killed between a rename and the receipt leaves the target at its `after`, which
 * recovery then receipts (SPEC 4); one killed while putting back leaves targets at `before` or
 * `after`, each of which recovery knows.
 */
import { closeSync, fsyncSync, linkSync, lstatSync, mkdirSync, openSync, readdirSync, renameSync, rmSync, unlinkSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fsyncDir } from '../host/files';

interface Replaced {
  target: string;
  /** The old file's hard link in the control folder, or null when there was none (a new file). */
  kept: string | null;
}

export class Replacement {
  private readonly done: Replaced[] = [];

  constructor(
    private readonly tmpDir: string,
    /** The action's id: names its temporary files and kept links. */
    private readonly id: string,
  ) {}

  /** Removes what an earlier attempt of this action left in the control folder. */
  clear(): void {
    let names: string[];
    try {
      names = readdirSync(this.tmpDir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw err;
    }
    for (const name of names) if (name.startsWith(`${this.id}.`)) rmSync(join(this.tmpDir, name), { force: true });
  }

  /** A temporary file of the control folder for `key` (one per target), made afresh by `write`. */
  temporary(key: string): string {
    mkdirSync(this.tmpDir, { recursive: true });
    return join(this.tmpDir, `${this.id}.${key}.tmp`);
  }

  /** Writes `write` into `tmp` (opened for `mode`) and syncs it. */
  static fill(tmp: string, mode: number, write: (fd: number) => void): void {
    rmSync(tmp, { force: true });
    const fd = openSync(tmp, 'w', mode);
    try {
      write(fd);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  }

  /** Renames `tmp` over `target`, keeping the old file (when `existed`) until `commit`. */
  put(tmp: string, target: string, existed: boolean, key: string): void {
    // The target's folder was checked by the caller a moment ago; a link swapped in since would be followed.
    if (lstatSync(dirname(target)).isSymbolicLink()) throw new Error('parent folder became a symlink during the write');
    const kept = existed ? join(this.tmpDir, `${this.id}.${key}.before`) : null;
    if (kept !== null) linkSync(target, kept);
    try {
      renameSync(tmp, target);
    } catch (err) {
      if (kept !== null) rmSync(kept, { force: true });
      throw err;
    }
    this.done.push({ target, kept });
    fsyncDir(dirname(target));
  }

  /** Every target back as it was, newest first, and the temporary files gone. */
  putBack(): void {
    for (const { target, kept } of this.done.reverse()) {
      if (kept === null) unlinkSync(target);
      else renameSync(kept, target);
      fsyncDir(dirname(target));
    }
    this.done.length = 0;
    this.clear();
  }

  /** The receipt is recorded: the old files are let go. */
  commit(): void {
    this.done.length = 0;
    this.clear();
  }
}
