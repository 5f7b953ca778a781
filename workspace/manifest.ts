/**
 * Workspace manifests: every entry below a folder, sorted by path, each file with the SHA-256 of
 * its content. apply_patch (the workspace digest an approval is bound to), show_diff and the
 * verifier read them, so an unchanged workspace must be cheap to check.
 *
 * The stat cache. A file whose size, mtime, ctime, inode and mode are what they were
 * at the last manifest of the same folder keeps its digest; every other file is read again, and
 * when no entry changed the previous manifest and its digest are returned as they are.
 *
 * Hazards:
 * - Times are compared as Node's `mtimeMs` / `ctimeMs`: seconds and nanoseconds in one double,
 *   exact to about a quarter of a microsecond at today's dates. Exact nanoseconds (bigint stats)
 *   double the cost of a check, since Node then builds four Date objects per entry; two stats
 *   closer than that are in the same kernel tick, which the racy rule below already covers.
 * - Racy entries (as in git). A file written again within the same timestamp tick as the write
 *   the cache saw keeps the same mtime and ctime, so its stat cannot tell. An entry whose mtime or
 *   ctime is not older than RACY_MARGIN_MS before the check that recorded it is never trusted:
 *   it is digested again at the next check. This assumes the file system's clock lags the host's
 *   by less than the margin (coarse kernel ticks, FAT's 2 s), true of local file systems.
 * - ctime cannot be set from user space, so putting an mtime back (utimes) after an edit of the
 *   same size still changes the entry's stat.
 * - The cache lives in this process's memory only: a restarted worker digests everything once,
 *   and never trusts a digest it did not take itself. It is bounded by entries and by
 *   workspaces (the most recently checked), whatever the number of runs.
 * - The returned manifest may be the cached array itself: callers must not change it.
 */
import { lstatSync, readdirSync, readlinkSync, type Stats } from 'node:fs';
import { resolve } from 'node:path';
import { digestRegular } from './hostile-read';
import { digestJson } from '../host/digest';

export type ManifestEntry =
  | { path: string; kind: 'file'; digest: string; executable: boolean }
  | { path: string; kind: 'symlink'; target: string }
  | { path: string; kind: 'dir' }
  /** A FIFO, socket or device node (a test may leave one): recorded by type, never opened. */
  | { path: string; kind: 'special'; type: 'fifo' | 'socket' | 'block' | 'char' | 'other' };

type FileEntry = Extract<ManifestEntry, { kind: 'file' }>;

/** Entries modified this close to (or after) a check are digested again at the next one. */
export const RACY_MARGIN_MS = 2000;
/** File entries the cache holds over all workspaces (about 300 bytes each)... */
const MAX_CACHED_FILES = 200_000;
/** ...and workspaces: a run waiting for a person keeps nothing here once others have been checked. */
const MAX_CACHED_WORKSPACES = 32;

/** What a file's stat said when its digest was taken. */
interface SeenFile {
  size: number;
  mtimeMs: number;
  ctimeMs: number;
  ino: number;
  mode: number;
  /** Modified too close to the check that took the digest: not trusted next time. */
  racy: boolean;
  entry: FileEntry;
}

/** A folder's sorted listing, and what its stat said when it was read. */
interface SeenDir {
  mtimeMs: number;
  ctimeMs: number;
  ino: number;
  racy: boolean;
  names: string[];
  /** By position in `names`: the file seen there, or null for any other kind of entry. */
  files: (SeenFile | null)[];
}

interface Cached {
  entries: ManifestEntry[];
  /** By folder path relative to the root ('' for the root). */
  dirs: Map<string, SeenDir>;
  files: number;
  digest: string | null;
  /** The sizes of its regular files, summed when first asked for. */
  bytes?: number;
}

/** Most recently used last. */
const cache = new Map<string, Cached>();
let cachedFiles = 0;

export interface ManifestOptions {
  /** The check's time in ms since the epoch (tests move it; default: now). */
  now?: number;
}

/** What the last check did (for tests and the benchmark). */
export const manifestCounters = { digested: 0, reused: 0, listed: 0 };

function specialType(stat: Stats): Extract<ManifestEntry, { kind: 'special' }>['type'] {
  return stat.isFIFO() ? 'fifo' : stat.isSocket() ? 'socket' : stat.isBlockDevice() ? 'block' : stat.isCharacterDevice() ? 'char' : 'other';
}

/** Every entry below `dir`, sorted by path. Symlinks are recorded, never followed; special files never opened. */
export function manifest(dir: string, options: ManifestOptions = {}): ManifestEntry[] {
  return check(dir, options).entries;
}

/** The digest of `dir`'s manifest; an unchanged workspace gives the cached digest without hashing its manifest again. */
export function workspaceDigest(dir: string, options: ManifestOptions = {}): string {
  const cached = check(dir, options);
  cached.digest ??= manifestDigest(cached.entries);
  return cached.digest;
}

/** The digest of `dir`'s manifest and the bytes of its regular files (their sizes), from one walk. */
export function workspaceState(dir: string, options: ManifestOptions = {}): { digest: string; bytes: number; entries: number } {
  const cached = check(dir, options);
  cached.digest ??= manifestDigest(cached.entries);
  if (cached.bytes === undefined) {
    let bytes = 0;
    for (const d of cached.dirs.values()) for (const f of d.files) bytes += f?.size ?? 0;
    cached.bytes = bytes;
  }
  return { digest: cached.digest, bytes: cached.bytes, entries: cached.entries.length };
}

export function manifestDigest(entries: ManifestEntry[]): string {
  return digestJson(entries);
}

/** Forgets every cached manifest (as a restarted worker would). */
export function clearManifestCache(): void {
  cache.clear();
  cachedFiles = 0;
}

function check(dir: string, options: ManifestOptions): Cached {
  const root = resolve(dir);
  const previous = cache.get(root);
  // Taken before any file is read: a write after a read is at or after this time.
  const walk = new Walk(previous, (options.now ?? Date.now()) - RACY_MARGIN_MS);
  walk.folder(root, '', lstatSync(root));
  Object.assign(manifestCounters, walk.counters);
  const next = walk.result();
  remember(root, next, previous);
  return next;
}

/**
 * One check of a folder against the previous one. Entries are compared with the previous manifest
 * as they come, in the same walk order: while they are the same objects nothing is copied, so an
 * unchanged tree allocates no manifest.
 */
class Walk {
  readonly dirs = new Map<string, SeenDir>();
  readonly counters = { digested: 0, reused: 0, listed: 0 };
  private readonly old: ManifestEntry[];
  private entries: ManifestEntry[] | null = null;
  private at = 0;

  constructor(
    private readonly previous: Cached | undefined,
    private readonly racyFrom: number,
  ) {
    this.old = previous?.entries ?? [];
  }

  private racy(stat: Stats): boolean {
    return stat.mtimeMs >= this.racyFrom || stat.ctimeMs >= this.racyFrom;
  }

  private push(entry: ManifestEntry): void {
    if (this.entries === null) {
      if (this.old[this.at] === entry) {
        this.at++;
        return;
      }
      this.entries = this.old.slice(0, this.at);
    }
    this.entries.push(entry);
  }

  private dirEntry(path: string): ManifestEntry {
    const same = this.entries === null ? this.old[this.at] : undefined;
    return same !== undefined && same.kind === 'dir' && same.path === path ? same : { path, kind: 'dir' };
  }

  /** The manifest (the previous one's own array when nothing changed) and what the cache keeps of this check. */
  result(): Cached {
    const { previous, old, entries, at, counters } = this;
    // Unchanged: every entry was the previous one, and there were as many.
    const unchanged = previous !== undefined && entries === null && at === old.length;
    const final = entries ?? (at === old.length ? old : old.slice(0, at));
    return { entries: final, dirs: this.dirs, files: counters.digested + counters.reused, digest: unchanged ? previous.digest : null };
  }

  folder(abs: string, rel: string, stat: Stats): void {
    const before = this.previous?.dirs.get(rel);
    // A listing changes only with its folder's mtime and ctime (created, removed, renamed entries).
    const sameListing =
      before !== undefined && !before.racy && before.mtimeMs === stat.mtimeMs && before.ctimeMs === stat.ctimeMs && before.ino === stat.ino;
    const names = sameListing ? before.names : readdirSync(abs).sort();
    if (!sameListing) this.counters.listed++;
    const aligned = before !== undefined && (sameListing || sameNames(before.names, names));
    const byName = before !== undefined && !aligned ? new Map(before.names.map((n, i) => [n, before.files[i]])) : null;
    // The folder's files, copied from the previous check's only once one of them differs.
    let files: (SeenFile | null)[] | null = aligned ? null : new Array<SeenFile | null>(names.length).fill(null);
    const set = (i: number, seen: SeenFile | null): void => {
      if (files === null) {
        if (before!.files[i] === seen) return;
        files = before!.files.slice();
      }
      files[i] = seen;
    };
    for (let i = 0; i < names.length; i++) {
      const name = names[i];
      const full = `${abs}/${name}`;
      const child = lstatSync(full);
      const path = rel === '' ? name : `${rel}/${name}`;
      if (child.isFile()) {
        const seen = this.file(full, path, child, aligned ? before.files[i] : (byName?.get(name) ?? null));
        set(i, seen);
        this.push(seen.entry);
        continue;
      }
      set(i, null);
      if (child.isSymbolicLink()) this.push({ path, kind: 'symlink', target: readlinkSync(full) });
      else if (child.isDirectory()) {
        this.push(this.dirEntry(path));
        this.folder(full, path, child);
      } else this.push({ path, kind: 'special', type: specialType(child) });
    }
    const dirRacy = this.racy(stat);
    this.dirs.set(
      rel,
      sameListing && files === null && !dirRacy
        ? before
        : { mtimeMs: stat.mtimeMs, ctimeMs: stat.ctimeMs, ino: stat.ino, racy: dirRacy, names, files: files ?? before!.files },
    );
  }

  /** A file: what the previous check saw when its stat is the same, else digested again. */
  private file(full: string, path: string, child: Stats, seen: SeenFile | null): SeenFile {
    if (
      seen !== null &&
      !seen.racy &&
      seen.size === child.size &&
      seen.mtimeMs === child.mtimeMs &&
      seen.ctimeMs === child.ctimeMs &&
      seen.ino === child.ino &&
      seen.mode === child.mode
    ) {
      this.counters.reused++;
      return seen;
    }
    const executable = (child.mode & 0o111) !== 0;
    // Opened without following or waiting, and read a chunk at a time: a test's file may be huge, or swapped for a FIFO.
    const digest = digestRegular(full, path);
    this.counters.digested++;
    // An unchanged digest keeps the entry object itself, so an unchanged manifest is recognised.
    const entry: FileEntry =
      seen !== null && seen.entry.digest === digest && seen.entry.executable === executable
        ? seen.entry
        : { path, kind: 'file', digest, executable };
    return {
      size: child.size,
      mtimeMs: child.mtimeMs,
      ctimeMs: child.ctimeMs,
      ino: child.ino,
      mode: child.mode,
      racy: this.racy(child),
      entry,
    };
  }
}

function sameNames(a: string[], b: string[]): boolean {
  return a.length === b.length && a.every((n, i) => n === b[i]);
}

function remember(key: string, next: Cached, previous: Cached | undefined): void {
  if (previous !== undefined) {
    cache.delete(key);
    cachedFiles -= previous.files;
  }
  if (next.files > MAX_CACHED_FILES) return;
  cache.set(key, next);
  cachedFiles += next.files;
  for (const [oldest, value] of cache) {
    if (cachedFiles <= MAX_CACHED_FILES && cache.size <= MAX_CACHED_WORKSPACES) break;
    cache.delete(oldest);
    cachedFiles -= value.files;
  }
}

/** Paths whose entry differs between two manifests (added, removed or changed), sorted. */
export function changedPaths(before: ManifestEntry[], after: ManifestEntry[]): string[] {
  const key = (e: ManifestEntry) => JSON.stringify(e);
  const a = new Map(before.map((e) => [e.path, key(e)]));
  const b = new Map(after.map((e) => [e.path, key(e)]));
  const paths = new Set<string>();
  for (const [p, k] of a) if (b.get(p) !== k) paths.add(p);
  for (const [p, k] of b) if (a.get(p) !== k) paths.add(p);
  return [...paths].sort();
}

/**
 * The entries of `before` and `after` at the paths that differ (a path absent on one side has no
 * entry there): what every comparison of two manifests needs, small when little changed.
 */
export function changedEntries(before: ManifestEntry[], after: ManifestEntry[]): { before: ManifestEntry[]; after: ManifestEntry[] } {
  const changed = new Set(changedPaths(before, after));
  return { before: before.filter((e) => changed.has(e.path)), after: after.filter((e) => changed.has(e.path)) };
}

/** Changed paths that are not folders: what a diff shows. */
export function changedFiles(before: ManifestEntry[], after: ManifestEntry[]): string[] {
  const dirs = new Set([...before, ...after].filter((e) => e.kind === 'dir').map((e) => e.path));
  return changedPaths(before, after).filter((p) => !dirs.has(p));
}
