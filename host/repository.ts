/**
 * A repository run's source of work: what its base commit says (settings, test command,
 * acceptance, project instructions, submodules), the workspace written from its tree, and the
 * verified change kept for `branch` and `patch`. Reads go through git plumbing (host/git.ts);
 * nothing here writes to the repository.
 *
 * Hazards: a tree's paths come from whoever made the commit. A path with an empty, `.`, `..` or
 * `.git` segment refuses the run; files are created with O_EXCL below folders this code made,
 * and symlinks are made last, so no write can follow a link, in the tree or planted by it.
 */
import { chmodSync, closeSync, existsSync, lstatSync, mkdirSync, openSync, readFileSync, rmSync, symlinkSync, writeSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { expectedFileSchema as expectedFile, type AcceptanceSpec, type RepoSource, type RunSpec, type TestsSpec } from '../core/contracts';
import { formatIssues } from '../core/validate';
import {
  capInstructions,
  detectTests,
  INSTRUCTIONS_FILE,
  parseRepoSettings,
  repositoryName,
  repositorySpec,
  SETTINGS_FILE,
  type Instructions,
  type RepoSettings,
  type TreeView,
} from '../core/repo-settings';
import { GitError, GitRepository, type TreeChange, type TreeEntry } from './git';
import { writeFileAtomic } from './files';
import { copyRegular } from './workspace/hostile-read';
import { sha256 } from './digest';
import { copyTree, manifest, manifestDigest, type ManifestEntry, type RunPaths } from './workspace/workspace';
import type { PreparedWorkspace, RepositoryFacts, RepositoryRef } from '../core/activities';

export type InspectedBase =
  | {
      ok: true;
      spec: RunSpec;
      ref: RepositoryRef;
      facts: RepositoryFacts;
      settings: RepoSettings | null;
      /** The instructions as the model gets them (null without AGENTS.md). */
      instructions: Instructions | null;
    }
  | { ok: false; detail: string };

/** Why a path of a tree may not be written into a workspace, or null. */
export function unsafeTreePath(path: string): string | null {
  if (path === '' || path.startsWith('/') || /[\0]/.test(path)) return 'an empty or absolute path';
  for (const segment of path.split('/')) {
    if (segment === '' || segment === '.' || segment === '..') return `a ${JSON.stringify(segment)} segment`;
    if (segment.toLowerCase() === '.git') return 'a .git segment';
  }
  return null;
}

const isBlob = (e: TreeEntry) => e.type === 'blob' && (e.mode === '100644' || e.mode === '100755');
const below = (dir: string, path: string) => path.startsWith(`${dir}/`);

/** A tree as the test detector sees it: paths, and the text of small files at the root. */
function treeView(repo: GitRepository, entries: TreeEntry[]): TreeView {
  const byPath = new Map(entries.map((e) => [e.path, e]));
  const folders = new Set<string>();
  for (const e of entries) for (let d = dirname(e.path); d !== '.'; d = dirname(d)) folders.add(d);
  return {
    has: (p) => byPath.has(p),
    hasFolder: (p) => folders.has(p),
    paths: () => byPath.keys(),
    read: (p) => {
      const e = byPath.get(p);
      return e && isBlob(e) ? repo.readBlob(e.oid).toString('utf8') : null;
    },
  };
}

/**
 * Reads what the base commit says and makes the run's rules, or says why the run cannot start.
 * Used by the command line (to refuse before any workflow starts) and by `loadRun` (the worker's
 * own check, on the same commit).
 */
export function inspectBase(repo: GitRepository, source: RepoSource): InspectedBase {
  let entries: TreeEntry[];
  try {
    entries = repo.lsTree(source.base_commit);
  } catch (err) {
    if (err instanceof GitError) return { ok: false, detail: `cannot read the tree of ${source.base_commit}: ${err.message}` };
    throw err;
  }
  for (const e of entries) {
    const unsafe = unsafeTreePath(e.path);
    if (unsafe !== null)
      return {
        ok: false,
        detail: `the base tree has a path with ${unsafe} (${JSON.stringify(e.path)}); it cannot be written into a workspace`,
      };
  }
  const byPath = new Map(entries.map((e) => [e.path, e]));
  const tree = treeView(repo, entries);

  const settingsEntry = byPath.get(SETTINGS_FILE);
  if (settingsEntry && !isBlob(settingsEntry)) return { ok: false, detail: `${SETTINGS_FILE} in the base tree is not a regular file` };
  const settingsBytes = settingsEntry ? repo.readBlob(settingsEntry.oid) : null;
  const parsed = parseRepoSettings(settingsBytes === null ? null : settingsBytes.toString('utf8'));
  if (!parsed.ok) return { ok: false, detail: parsed.detail };
  const settings = parsed.settings;

  let tests: TestsSpec;
  let testsSource: string;
  if (source.tests) [tests, testsSource] = [source.tests, 'task'];
  else if (settings?.tests) [tests, testsSource] = [settings.tests, 'settings'];
  else {
    const detected = detectTests(tree);
    if (!detected.ok) return { ok: false, detail: detected.detail };
    [tests, testsSource] = [detected.tests, `detected: ${detected.detected}`];
  }

  let acceptance: AcceptanceSpec | null = null;
  let treeDir: string | null = null;
  let hostDir: string | null = null;
  if (source.acceptance) {
    const { dir, ...spec } = source.acceptance;
    const problem = expectedProblem(() => readFileSync(join(resolve(dir), 'expected.json'), 'utf8'));
    if (problem !== null) return { ok: false, detail: `acceptance ${dir}: ${problem}` };
    [acceptance, hostDir] = [spec, dir];
  } else if (settings?.acceptance) {
    const { dir, ...spec } = settings.acceptance;
    const expected = byPath.get(`${dir}/expected.json`);
    if (!expected || !isBlob(expected))
      return { ok: false, detail: `${SETTINGS_FILE}: acceptance.dir: the base tree has no ${dir}/expected.json` };
    const problem = expectedProblem(() => repo.readBlob(expected.oid).toString('utf8'));
    if (problem !== null) return { ok: false, detail: `${dir}/expected.json: ${problem}` };
    [acceptance, treeDir] = [spec, dir];
  }

  const agents = byPath.get(INSTRUCTIONS_FILE);
  const agentsBytes = agents && isBlob(agents) ? repo.readBlob(agents.oid) : null;
  const instructions = agentsBytes === null ? null : capInstructions(agentsBytes);
  const submodules = entries.filter((e) => e.type === 'commit').map((e) => e.path);
  const extraProtected = [...submodules.flatMap((p) => [p, `${p}/**`]), ...(treeDir ? [treeDir, `${treeDir}/**`] : [])];
  const name = source.id ?? repositoryName(resolve(source.path));
  const spec = repositorySpec({ id: name, task: source.task, settings, tests, acceptance, extraProtected });
  return {
    ok: true,
    spec,
    settings,
    instructions,
    ref: { path: source.path, base_commit: source.base_commit, acceptance_tree_dir: treeDir, acceptance_host_dir: hostDir },
    facts: {
      name,
      base_commit: source.base_commit,
      settings_digest: settingsBytes === null ? null : sha256(settingsBytes),
      tests_source: testsSource,
      tests,
      acceptance: source.acceptance ? 'task' : settings?.acceptance ? 'settings' : null,
      instructions: agentsBytes === null ? null : { digest: sha256(agentsBytes), bytes: agentsBytes.length, cut: instructions!.cut },
      submodules,
      files: entries.filter((e) => e.type === 'blob' && !(treeDir && below(treeDir, e.path))).length,
      setup: settings?.setup ?? null,
      egress: settings?.egress ?? null,
    },
  };
}

export type LoadedRepository =
  | {
      ok: true;
      spec: RunSpec;
      ref: RepositoryRef;
      facts: RepositoryFacts;
      image: string | null;
      /** Digest of the stored instructions. */ instructions: string | null;
    }
  | { ok: false; detail: string };

/**
 * `loadRun` of a repository run: the repository, its base commit and what the base tree says,
 * checked again on the worker (the command line checked the same commit before starting the
 * run). The instructions go to the host store; the run carries their digest.
 */
export function loadRepository(source: RepoSource, storeInstructions: (value: Instructions) => string): LoadedRepository {
  let repo: GitRepository;
  try {
    repo = GitRepository.open(source.path);
    if (repo.resolveCommit(source.base_commit) !== source.base_commit)
      return { ok: false, detail: `${source.base_commit} is not a commit of ${source.path}` };
  } catch (err) {
    if (err instanceof GitError && err.kind !== 'git_missing' && err.kind !== 'failed') return { ok: false, detail: err.message };
    throw err;
  }
  const inspected = inspectBase(repo, source);
  if (!inspected.ok) return inspected;
  return {
    ok: true,
    spec: inspected.spec,
    ref: inspected.ref,
    facts: inspected.facts,
    image: inspected.settings?.image ?? null,
    instructions: inspected.instructions ? storeInstructions(inspected.instructions) : null,
  };
}

function expectedProblem(read: () => string): string | null {
  let text: string;
  try {
    text = read();
  } catch (err) {
    return `expected.json cannot be read: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`;
  }
  try {
    const parsed = expectedFile.safeParse(JSON.parse(text));
    return parsed.success ? null : `expected.json: ${formatIssues(parsed.error)}`;
  } catch (err) {
    return `expected.json is not JSON: ${(err as Error).message}`;
  }
}

/** Creates `rel` below `root` with O_EXCL, making its folders; never through an existing link. */
export function createFile(root: string, rel: string, bytes: Buffer, mode: number): void {
  const parts = rel.split('/');
  let dir = root;
  for (const part of parts.slice(0, -1)) {
    dir = join(dir, part);
    let st;
    try {
      st = lstatSync(dir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      mkdirSync(dir);
      continue;
    }
    if (!st.isDirectory()) throw new Error(`${rel}: a parent is not a folder in the tree`);
  }
  const file = join(root, rel);
  const fd = openSync(file, 'wx', mode);
  try {
    for (let off = 0; off < bytes.length;) off += writeSync(fd, bytes, off, bytes.length - off);
  } finally {
    closeSync(fd);
  }
  chmodSync(file, mode); // not the umask's
}

/**
 * Writes the entries of `commit`'s tree that `keep` selects below `root`, renamed by `rename`:
 * regular files with their executable bit, symlinks as links (their target as committed, never
 * followed), submodules skipped. Returns the number of entries written.
 */
async function writeTree(repo: GitRepository, entries: TreeEntry[], root: string, rename: (path: string) => string): Promise<number> {
  mkdirSync(root, { recursive: true });
  const files = new Map<string, TreeEntry[]>();
  for (const e of entries.filter(isBlob)) files.set(e.oid, [...(files.get(e.oid) ?? []), e]);
  await repo.readBlobs([...files.keys()], (oid, bytes) => {
    for (const e of files.get(oid) ?? []) createFile(root, rename(e.path), bytes, e.mode === '100755' ? 0o755 : 0o644);
  });
  const links = entries.filter((e) => e.type === 'blob' && e.mode === '120000');
  const targets = new Map<string, string>();
  await repo.readBlobs([...new Set(links.map((e) => e.oid))], (oid, bytes) => targets.set(oid, bytes.toString('utf8')));
  for (const e of links) {
    const path = join(root, rename(e.path));
    mkdirSync(dirname(path), { recursive: true });
    if (lstatSync(dirname(path)).isSymbolicLink()) throw new Error(`${e.path}: a parent is a link`);
    symlinkSync(targets.get(e.oid)!, path);
  }
  return entries.filter(isBlob).length + links.length;
}

/**
 * The run's fresh workspace from the base tree, its baseline copy and manifest, and (when the
 * settings name one) the acceptance folder in the control folder, out of the workspace.
 * Idempotent like the fixture's: `prepared.json` is written last.
 */
export async function prepareRepositoryWorkspace(paths: RunPaths, ref: RepositoryRef): Promise<PreparedWorkspace> {
  const marker = join(paths.control, 'prepared.json');
  if (existsSync(marker)) return JSON.parse(readFileSync(marker, 'utf8')) as PreparedWorkspace;
  rmSync(paths.root, { recursive: true, force: true });
  const repo = GitRepository.open(ref.path);
  const entries = repo.lsTree(ref.base_commit);
  for (const e of entries) {
    const unsafe = unsafeTreePath(e.path);
    if (unsafe !== null) throw new Error(`the base tree has a path with ${unsafe}`);
  }
  const accDir = ref.acceptance_tree_dir;
  const inWorkspace = entries.filter((e) => !(accDir && below(accDir, e.path)));
  await writeTree(repo, inWorkspace, paths.workspace, (p) => p);
  if (accDir)
    await writeTree(
      repo,
      entries.filter((e) => below(accDir, e.path)),
      join(paths.control, 'acceptance'),
      (p) => p.slice(accDir.length + 1),
    );
  copyTree(paths.workspace, paths.baseline);
  const manifestEntries = manifest(paths.workspace);
  writeFileAtomic(join(paths.control, 'baseline-manifest.json'), JSON.stringify(manifestEntries), { tmpDir: paths.tmp });
  const prepared: PreparedWorkspace = {
    workspace_digest: manifestDigest(manifestEntries),
    files: manifestEntries.filter((e) => e.kind === 'file').length,
  };
  writeFileAtomic(marker, JSON.stringify(prepared), { tmpDir: paths.tmp });
  return prepared;
}

// ---- the verified change ----

/** One changed path of the verified state, as a tree would hold it. */
export type ChangeEntry =
  | { path: string; kind: 'file'; executable: boolean; digest: string }
  | { path: string; kind: 'symlink'; target: string }
  | { path: string; kind: 'deleted' };

/** What the verifier saw, kept in the control folder: `branch` and `patch` make their commit from it. */
export interface VerifiedChange {
  schema_version: 1;
  base_commit: string;
  changes: ChangeEntry[];
}

const changeFolder = (paths: RunPaths) => join(paths.control, 'verified');

/**
 * The change between the baseline and the workspace, as git would record it: files with their
 * executable bit, symlinks, deletions (folders are not entries of a tree). Paths that are special
 * files (a FIFO, a socket) cannot be in a tree; they are returned apart.
 */
export function treeChanges(base: ManifestEntry[], current: ManifestEntry[]): { changes: ChangeEntry[]; unrepresentable: string[] } {
  const b = new Map(base.map((e) => [e.path, e]));
  const c = new Map(current.map((e) => [e.path, e]));
  const changes: ChangeEntry[] = [];
  const unrepresentable: string[] = [];
  for (const path of [...new Set([...b.keys(), ...c.keys()])].sort()) {
    const before = b.get(path);
    const after = c.get(path);
    if (before && after && JSON.stringify(before) === JSON.stringify(after)) continue;
    if (after?.kind === 'file') changes.push({ path, kind: 'file', executable: after.executable, digest: after.digest });
    else if (after?.kind === 'symlink') changes.push({ path, kind: 'symlink', target: after.target });
    else if (after?.kind === 'special') unrepresentable.push(path);
    else if (before && (before.kind === 'file' || before.kind === 'symlink')) changes.push({ path, kind: 'deleted' });
  }
  return { changes, unrepresentable };
}

/**
 * Keeps the verified change: `change.json` and a copy of each changed file, taken from the
 * workspace at the moment its manifest was read (before the verifier's own test run).
 */
export function keepVerifiedChange(paths: RunPaths, baseCommit: string, changes: ChangeEntry[]): void {
  const dir = changeFolder(paths);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(join(dir, 'files'), { recursive: true });
  for (const c of changes) {
    if (c.kind !== 'file') continue;
    const to = join(dir, 'files', c.path);
    mkdirSync(dirname(to), { recursive: true });
    // The bytes whose digest the manifest took, read without following a link or opening a FIFO.
    if (copyRegular(join(paths.workspace, c.path), to, c.path) !== c.digest)
      throw new VerifiedChangeError(`${c.path} changed while the verified change was kept`);
  }
  const change: VerifiedChange = { schema_version: 1, base_commit: baseCommit, changes };
  writeFileAtomic(join(dir, 'change.json'), JSON.stringify(change), { tmpDir: paths.tmp });
}

export class VerifiedChangeError extends Error {
  override name = 'VerifiedChangeError';
}

/** The verified change with each file's bytes, checked against the digests the verifier recorded. */
export function readVerifiedChange(paths: RunPaths): { base_commit: string; changes: TreeChange[] } {
  const file = join(changeFolder(paths), 'change.json');
  if (!existsSync(file))
    throw new VerifiedChangeError(
      `no verified change in ${changeFolder(paths)}: the run's state folder is not on this machine, or its run was not verified`,
    );
  const change = JSON.parse(readFileSync(file, 'utf8')) as VerifiedChange;
  const changes = change.changes.map((c) => {
    if (c.kind !== 'file') return c;
    const bytes = readFileSync(join(changeFolder(paths), 'files', c.path));
    if (sha256(bytes) !== c.digest) throw new VerifiedChangeError(`${c.path} in the kept change differs from what was verified`);
    return { path: c.path, kind: 'file' as const, executable: c.executable, bytes };
  });
  return { base_commit: change.base_commit, changes };
}
