/**
 * The manifest's stat cache on a real temp folder: what it reuses, and the edits it must never
 * miss (a same-size edit whose mtime is put back, a write in the same tick as the check).
 */
import { chmodSync, lstatSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { sha256 } from '../host/digest';
import {
  clearManifestCache,
  manifest,
  manifestCounters,
  manifestDigest,
  RACY_MARGIN_MS,
  workspaceDigest,
  type ManifestEntry,
} from '../workspace/manifest';
import { tempDir, writeFiles } from './helpers/run-dir';

/** A check this far after the files were written sees none of them as racy. */
const LATER = 60_000;
const fileEntry = (entries: ManifestEntry[], path: string) => entries.find((e) => e.path === path);

function tree(): string {
  const dir = join(tempDir('manifest'), 'ws');
  writeFiles(dir, { 'a.txt': 'alpha\n', 'src/b.py': 'print("b")\n', 'src/deep/c.txt': 'c\n' });
  return dir;
}

describe('the manifest stat cache', () => {
  beforeEach(() => clearManifestCache());

  it('digests every file once, then reuses the manifest and its digest while nothing changes', () => {
    const dir = tree();
    const now = Date.now() + LATER;
    const first = manifest(dir, { now });
    expect(manifestCounters.digested).toBe(3);
    const digest = workspaceDigest(dir, { now });
    expect(manifestCounters.digested).toBe(0);
    expect(digest).toBe(manifestDigest(first));
    expect(manifest(dir, { now })).toBe(first);
    expect(manifestCounters).toMatchObject({ digested: 0, reused: 3 });
    expect(fileEntry(first, 'src/b.py')).toEqual({ path: 'src/b.py', kind: 'file', digest: sha256('print("b")\n'), executable: false });
  });

  it('sees an edit of the same size whose mtime was put back to the cached value', () => {
    const dir = tree();
    const file = join(dir, 'src/b.py');
    const cachedTime = new Date('2024-01-02T03:04:05Z');
    utimesSync(file, cachedTime, cachedTime);
    const now = Date.now() + LATER;
    const before = lstatSync(file);
    const digest = workspaceDigest(dir, { now });
    writeFileSync(file, 'print("B")\n');
    utimesSync(file, cachedTime, cachedTime);
    const after = lstatSync(file);
    // Everything git's stat check compares is the same but ctime, which utimes cannot set.
    expect([after.size, after.mtimeMs, after.ino, after.mode]).toEqual([before.size, before.mtimeMs, before.ino, before.mode]);
    const entries = manifest(dir, { now: now + 1 });
    expect(fileEntry(entries, 'src/b.py')).toMatchObject({ digest: sha256('print("B")\n') });
    expect(manifestCounters.digested).toBe(1);
    expect(workspaceDigest(dir, { now: now + 1 })).not.toBe(digest);
  });

  it('never trusts a file written in the margin before a check, and sees a same-size write right after it', () => {
    const dir = tree();
    const file = join(dir, 'a.txt');
    manifest(dir);
    // Written moments ago: racy, so digested again although its stat did not change.
    manifest(dir);
    expect(manifestCounters.digested).toBe(3);
    // A write in the same tick as the check the cache recorded: size, and perhaps mtime and ctime, unchanged.
    writeFileSync(file, 'ALPHA\n');
    expect(fileEntry(manifest(dir), 'a.txt')).toMatchObject({ digest: sha256('ALPHA\n') });
    // Once the margin has passed, the same files are trusted.
    const later = Date.now() + RACY_MARGIN_MS + LATER;
    manifest(dir, { now: later });
    manifest(dir, { now: later });
    expect(manifestCounters).toMatchObject({ digested: 0, reused: 3 });
  });

  it('sees files added and removed, a mode change, and a file that became a folder', () => {
    const dir = tree();
    const now = Date.now() + LATER;
    const first = manifest(dir, { now });
    writeFileSync(join(dir, 'src/new.txt'), 'new\n');
    rmSync(join(dir, 'src/deep/c.txt'));
    chmodSync(join(dir, 'a.txt'), 0o755);
    const second = manifest(dir, { now: now + 1 });
    expect(second).not.toBe(first);
    expect(fileEntry(second, 'src/new.txt')).toMatchObject({ kind: 'file', digest: sha256('new\n') });
    expect(fileEntry(second, 'src/deep/c.txt')).toBeUndefined();
    expect(fileEntry(second, 'a.txt')).toMatchObject({ executable: true });
    rmSync(join(dir, 'src/new.txt'));
    writeFiles(dir, { 'src/new.txt/inner.txt': 'inner\n' });
    const third = manifest(dir, { now: now + 2 });
    expect(fileEntry(third, 'src/new.txt')).toEqual({ path: 'src/new.txt', kind: 'dir' });
    expect(fileEntry(third, 'src/new.txt/inner.txt')).toMatchObject({ digest: sha256('inner\n') });
  });

  it('gives the same manifest from an empty cache (a restarted worker digests everything once)', () => {
    const dir = tree();
    const now = Date.now() + LATER;
    const digest = workspaceDigest(dir, { now });
    clearManifestCache();
    expect(workspaceDigest(dir, { now })).toBe(digest);
    expect(manifestCounters.digested).toBe(3);
  });
});
