/**
 * A base tree's listing judged in a workspace thread (`readListing`, an operation of
 * thread-ops.ts, and the import's plan, workspace/tree-write.ts, through `eachEntry`): every entry
 * parsed and checked against the operator's limits and the paths a workspace may hold, and only
 * what the caller asked about handed back. The event loop has only collected the listing's bytes
 * (`GitRepository.listing`, bounded by the limits as they stream), so a tree of any shape costs
 * the worker's other runs nothing.
 *
 * Hazards: a path comes from whoever made the commit. One with an empty, `.`, `..` or `.git`
 * segment is never written into a workspace (`unsafeTreePath`), and a tree holding one is refused.
 */
import { ListingReader, type RepositoryLimits, type TreeEntry } from './git';

/** Why a path of a tree may not be written into a workspace, or null. */
export function unsafeTreePath(path: string): string | null {
  if (path === '' || path.startsWith('/') || /[\0]/.test(path)) return 'an empty or absolute path';
  for (const segment of path.split('/')) {
    if (segment === '' || segment === '.' || segment === '..') return `a ${JSON.stringify(segment)} segment`;
    if (segment.toLowerCase() === '.git') return 'a .git segment';
  }
  return null;
}

/** The refusal of a tree holding `path`, which is unsafe for `why`. */
export const unsafeRefusal = (path: string, why: string) =>
  `the base tree has a path with ${why} (${JSON.stringify(path)}); it cannot be written into a workspace`;

/** What a caller asks of a listing. */
export interface ListingQuery {
  /** Paths whose entries come back when the tree has them. */
  paths: string[];
  /** Regular expressions (their source): whether some path of the tree matches each. */
  patterns: string[];
  /** A folder whose files are counted apart (the acceptance folder), or null. */
  apart: string | null;
}

export type ListingAnswer =
  | {
      ok: true;
      /** The entries of the paths asked for that the tree has. */
      entries: TreeEntry[];
      /** For each pattern asked, whether a path matched it. */
      matched: boolean[];
      /** Paths of the submodules (commit entries). */
      submodules: string[];
      /** Files (blob entries) outside the folder counted apart. */
      files: number;
    }
  /** A tree with a path no workspace may hold. */
  | { ok: false; detail: string };

/**
 * Calls `visit` with each entry of `listing` (as `GitRepository.listing` collected it), in order:
 * the first entry over a limit, or that is no entry, throws its GitError.
 */
export function eachEntry(listing: Uint8Array, limits: RepositoryLimits, visit: (e: TreeEntry) => void): void {
  const reader = new ListingReader(limits);
  const bytes = Buffer.from(listing.buffer, listing.byteOffset, listing.byteLength);
  let start = 0;
  for (let at = bytes.indexOf(0); at >= 0; at = bytes.indexOf(0, start)) {
    visit(reader.entry(bytes.subarray(start, at)));
    start = at + 1;
  }
}

/** Reads `listing` for `query`; a tree within the limits with an unsafe path is refused naming its first. */
export function readListing(listing: Uint8Array, limits: RepositoryLimits, query: ListingQuery): ListingAnswer {
  const wanted = new Set(query.paths);
  const patterns = query.patterns.map((p) => new RegExp(p));
  const answer = {
    ok: true as const,
    entries: [] as TreeEntry[],
    matched: patterns.map(() => false),
    submodules: [] as string[],
    files: 0,
  };
  let unsafe: string | null = null;
  eachEntry(listing, limits, (e) => {
    const why = unsafe === null ? unsafeTreePath(e.path) : null;
    if (why !== null) unsafe = unsafeRefusal(e.path, why);
    if (wanted.has(e.path)) answer.entries.push(e);
    patterns.forEach((p, i) => (answer.matched[i] ||= p.test(e.path)));
    if (e.type === 'commit') answer.submodules.push(e.path);
    if (e.type === 'blob' && !(query.apart !== null && e.path.startsWith(`${query.apart}/`))) answer.files++;
  });
  return unsafe === null ? answer : { ok: false, detail: unsafe };
}
