/**
 * A repository run's source of work: what its base commit says (settings, test command,
 * acceptance, project instructions, submodules), the workspace written from its tree, and the
 * verified change kept for `branch` and `patch`. Reads go through git plumbing (workspace/git.ts) on a
 * runner the caller opens: git in a container for every repository the user has not trusted on
 * the local backend. Nothing here writes to the repository.
 *
 * Hazards: a tree's paths and sizes come from whoever made the commit. A path with an empty, `.`,
 * `..` or `.git` segment refuses the run, and so does a tree over the operator's limits (its
 * entries counted while the listing streams and each checked in a workspace thread,
 * workspace/listing.ts, before anything is written). The files a run reads whole (settings,
 * instructions, the test detector's, an expected.json) are refused past METADATA_BYTES, and so is
 * a tree whose settings and submodules would make the run's rules larger than RULES_BYTES. The
 * workspace is written in a workspace thread (tree-write.ts), in batches as the bytes arrive.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { expectedFileSchema as expectedFile, type AcceptanceSpec, type RepoSource, type RunSpec, type TestsSpec } from '../core/contracts';
import { formatIssues } from '../core/validate';
import {
  capInstructions,
  DETECTION_FILES,
  DETECTION_MARKERS,
  PYTHON_TEST_FILE,
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
import type { RepositoryLimits } from '../core/limits';
import { entryKind, GitError, GitRepository, requireFolder, type GitRunner, type TreeEntry } from './git';
import type { ListingAnswer, ListingQuery } from './listing';
import { sha256 } from '../host/digest';
import { offThread, type CallOptions } from './thread';
import type { BlobReads, PlannedAt } from './tree-write';
import type { RunPaths } from './workspace';
import type { PreparedWorkspace, RepositoryFacts, RepositoryRef } from '../core/activities';

/** Files of the base tree read whole (settings, instructions, the detector's, expected.json): at most this many bytes. */
export const METADATA_BYTES = 4 * 1024 * 1024;
/**
 * Bytes the base tree may add to the run's rules and facts, which travel in the workflow's
 * history and the model's context: its settings as parsed and its submodules' paths, as JSON.
 */
export const RULES_BYTES = 128 * 1024;

/** Opens a runner on a repository folder of this machine (the caller decides where git runs). */
export type OpenRunner = (hostPath: string) => Promise<GitRunner>;

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

const isBlob = (e: TreeEntry) => entryKind(e) === 'file';

/**
 * Opens `path` through a runner of `open`, runs `fn` on it and closes the runner, whatever
 * happens. A repository that is none, a ref that names nothing and a repository over the limits
 * are GitErrors for the caller to word.
 */
export async function withRepository<T>(
  open: OpenRunner,
  path: string,
  limits: RepositoryLimits,
  fn: (repo: GitRepository) => Promise<T>,
): Promise<T> {
  requireFolder(resolve(path));
  const runner = await open(resolve(path));
  try {
    return await fn(await GitRepository.open(runner, resolve(path), limits));
  } catch (err) {
    // A stalled or endless reading is the repository's doing: the refusal names it.
    if (err instanceof GitError && err.kind === 'timeout') throw new GitError('timeout', `${path}: ${err.message}`);
    throw err;
  } finally {
    await runner.close();
  }
}

/** The small files of the base tree that decide the run, read in one batch (each at most METADATA_BYTES). */
async function readSmall(repo: GitRepository, entries: TreeEntry[]): Promise<Map<string, Buffer>> {
  const wanted = entries.filter(isBlob);
  for (const e of wanted)
    if (e.size > METADATA_BYTES)
      throw new GitError(
        'too_large',
        `${e.path} in the base tree has ${e.size} bytes; the harness reads it whole, up to ${METADATA_BYTES}`,
      );
  const byOid = new Map<string, Buffer>();
  await repo.readBlobs([...new Set(wanted.map((e) => e.oid))], (oid, bytes) => void byOid.set(oid, bytes));
  return new Map(wanted.map((e) => [e.path, byOid.get(e.oid)!]));
}

/** What the run reads of every base tree: the settings, the instructions and the test detector's files. */
const BASE_QUERY: ListingQuery = {
  paths: [SETTINGS_FILE, INSTRUCTIONS_FILE, ...DETECTION_FILES, ...DETECTION_MARKERS],
  patterns: [PYTHON_TEST_FILE.source],
  apart: null,
};

/** `listing` judged in a workspace thread for `query`: the answer (a refusal for an unsafe path), or a GitError for a tree over the limits. */
const askListing = (repo: GitRepository, listing: Uint8Array, query: ListingQuery) =>
  offThread('readListing', [listing, repo.limits, query]);

/** The entries of `paths` in the tree of `commit`, its listing judged in a workspace thread. */
export async function entriesOf(repo: GitRepository, commit: string, paths: string[]): Promise<ListingAnswer> {
  return askListing(repo, await repo.listing(commit), { paths, patterns: [], apart: null });
}

/** The detector's view of a base tree, from the answer to BASE_QUERY: a question it did not ask is this code's mistake. */
function detectorView(base: Extract<ListingAnswer, { ok: true }>, small: Map<string, Buffer>): TreeView {
  const asked = (path: string) => {
    if (!BASE_QUERY.paths.includes(path)) throw new Error(`the base tree's listing was not asked about ${path}`);
    return path;
  };
  const found = new Set(base.entries.map((e) => e.path));
  return {
    has: (path) => found.has(asked(path)),
    someMatches: (pattern) => {
      const i = BASE_QUERY.patterns.indexOf(pattern.source);
      if (i < 0) throw new Error(`the base tree's listing was not asked about ${pattern}`);
      return base.matched[i];
    },
    read: (path) => small.get(asked(path))?.toString('utf8') ?? null,
  };
}

/**
 * Reads what the base commit says and makes the run's rules, or says why the run cannot start.
 * Used by the command line (to refuse before any workflow starts) and by `loadRun` (the worker's
 * own check, on the same commit). The tree's listing is judged in a workspace thread; this side
 * holds its bytes and the few entries it asked about.
 */
export async function inspectBase(repo: GitRepository, source: RepoSource): Promise<InspectedBase> {
  let listing: Uint8Array;
  let base: ListingAnswer;
  try {
    listing = await repo.listing(source.base_commit);
    base = await askListing(repo, listing, BASE_QUERY);
  } catch (err) {
    if (err instanceof GitError && err.kind === 'too_large') return { ok: false, detail: `too_large: ${err.message}` };
    if (err instanceof GitError) return { ok: false, detail: `cannot read the tree of ${source.base_commit}: ${err.message}` };
    throw err;
  }
  if (!base.ok) return base;

  const settingsEntry = base.entries.find((e) => e.path === SETTINGS_FILE);
  if (settingsEntry && !isBlob(settingsEntry)) return { ok: false, detail: `${SETTINGS_FILE} in the base tree is not a regular file` };
  let small: Map<string, Buffer>;
  try {
    small = await readSmall(
      repo,
      base.entries.filter((e) => !(DETECTION_MARKERS as readonly string[]).includes(e.path)),
    );
  } catch (err) {
    if (err instanceof GitError && err.kind === 'too_large') return { ok: false, detail: `too_large: ${err.message}` };
    throw err;
  }
  const settingsBytes = small.get(SETTINGS_FILE) ?? null;
  const parsed = parseRepoSettings(settingsBytes === null ? null : settingsBytes.toString('utf8'));
  if (!parsed.ok) return { ok: false, detail: parsed.detail };
  const settings = parsed.settings;
  const ruleBytes = Buffer.byteLength(JSON.stringify({ settings, submodules: base.submodules }));
  if (ruleBytes > RULES_BYTES)
    return {
      ok: false,
      detail: `too_large: the base tree's settings and submodules make ${ruleBytes} bytes of the run's rules, over ${RULES_BYTES} (they travel in the run's history and the model's context)`,
    };

  let tests: TestsSpec;
  let testsSource: string;
  if (source.tests) [tests, testsSource] = [source.tests, 'task'];
  else if (settings?.tests) [tests, testsSource] = [settings.tests, 'settings'];
  else {
    const detected = detectTests(detectorView(base, small));
    if (!detected.ok) return { ok: false, detail: detected.detail };
    [tests, testsSource] = [detected.tests, `detected: ${detected.detected}`];
  }

  let acceptance: AcceptanceSpec | null = null;
  let files = base.files;
  let treeDir: string | null = null;
  let hostDir: string | null = null;
  if (source.acceptance) {
    const { dir, ...spec } = source.acceptance;
    const problem = expectedProblem(() => readFileSync(join(resolve(dir), 'expected.json'), 'utf8'));
    if (problem !== null) return { ok: false, detail: `acceptance ${dir}: ${problem}` };
    [acceptance, hostDir] = [spec, dir];
  } else if (settings?.acceptance) {
    const { dir, ...spec } = settings.acceptance;
    const apart = await askListing(repo, listing, { paths: [`${dir}/expected.json`], patterns: [], apart: dir });
    if (!apart.ok) return apart;
    const expected = apart.entries[0];
    if (!expected || !isBlob(expected))
      return { ok: false, detail: `${SETTINGS_FILE}: acceptance.dir: the base tree has no ${dir}/expected.json` };
    let text: string;
    try {
      text = (await readSmall(repo, [expected])).get(expected.path)!.toString('utf8');
    } catch (err) {
      if (err instanceof GitError && err.kind === 'too_large') return { ok: false, detail: `too_large: ${err.message}` };
      throw err;
    }
    const problem = expectedProblem(() => text);
    if (problem !== null) return { ok: false, detail: `${dir}/expected.json: ${problem}` };
    [acceptance, treeDir, files] = [spec, dir, apart.files];
  }

  const agentsBytes = small.get(INSTRUCTIONS_FILE) ?? null;
  const instructions = agentsBytes === null ? null : capInstructions(agentsBytes);
  const extraProtected = [...base.submodules.flatMap((p) => [p, `${p}/**`]), ...(treeDir ? [treeDir, `${treeDir}/**`] : [])];
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
      submodules: base.submodules,
      files,
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

/** A refusal's words for what opening a repository or resolving its base found. */
function refusal(err: unknown): { ok: false; detail: string } | null {
  if (!(err instanceof GitError) || err.kind === 'git_missing' || err.kind === 'failed') return null;
  return { ok: false, detail: err.kind === 'too_large' ? `too_large: ${err.message}` : err.message };
}

/**
 * `loadRun` of a repository run: the repository, its base commit and what the base tree says,
 * checked again on the worker (the command line checked the same commit before starting the
 * run). The instructions go to the host store; the run carries their digest.
 */
export async function loadRepository(
  open: OpenRunner,
  limits: RepositoryLimits,
  source: RepoSource,
  storeInstructions: (value: Instructions) => string,
): Promise<LoadedRepository> {
  let inspected: InspectedBase;
  try {
    inspected = await withRepository(open, source.path, limits, async (repo) => {
      if ((await repo.resolveCommit(source.base_commit)) !== source.base_commit)
        return { ok: false, detail: `${source.base_commit} is not a commit of ${source.path}` };
      return inspectBase(repo, source);
    });
  } catch (err) {
    const refused = refusal(err);
    if (refused) return refused;
    throw err;
  }
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

/** Bytes of blobs one batch carries to the workspace thread, and blobs: the memory a tree import holds at once. */
const BATCH_BYTES = 8 * 1024 * 1024;
const BATCH_FILES = 1024;

/**
 * Streams the blobs `reads` names from git to the workspace thread, in batches, for it to write
 * where the plan says (`writePlanned`, workspace/tree-write.ts).
 */
async function streamPlanned(repo: GitRepository, reads: BlobReads, at: Omit<PlannedAt, 'from'>, call: CallOptions): Promise<void> {
  let batch: { oids: string[]; bytes: Buffer[]; size: number } = { oids: [], bytes: [], size: 0 };
  let from = 0;
  const flush = async () => {
    if (batch.oids.length === 0) return;
    const data = new Uint8Array(batch.size);
    let offset = 0;
    const lengths = batch.bytes.map((b) => {
      data.set(b, offset);
      offset += b.length;
      return b.length;
    });
    const oids = batch.oids;
    batch = { oids: [], bytes: [], size: 0 };
    await offThread(
      'writePlanned',
      [
        { ...at, from },
        { oids, lengths, data },
      ],
      { ...call, transfer: [data.buffer] },
    );
    from += oids.length;
  };
  await repo.readBlobStream(reads.input, reads.count, async (oid, bytes) => {
    batch.oids.push(oid);
    batch.bytes.push(bytes);
    batch.size += bytes.length;
    if (batch.size >= BATCH_BYTES || batch.oids.length >= BATCH_FILES) await flush();
  });
  await flush();
}

/**
 * The run's fresh workspace from the base tree, its baseline copy and manifest, and (when the
 * settings name one) the acceptance folder in the control folder, out of the workspace.
 * Idempotent like the fixture's: `prepared.json` is written last.
 */
export async function prepareRepositoryWorkspace(
  paths: RunPaths,
  ref: RepositoryRef,
  open: OpenRunner,
  limits: RepositoryLimits,
  onProgress?: () => void,
): Promise<PreparedWorkspace> {
  const marker = join(paths.control, 'prepared.json');
  if (existsSync(marker)) return JSON.parse(readFileSync(marker, 'utf8')) as PreparedWorkspace;
  const call = { key: paths.workspace, onProgress };
  await offThread('beginTree', [paths], call);
  await withRepository(open, ref.path, limits, async (repo) => {
    // The plan is made and kept in a workspace thread: this side streams blobs, never entries.
    const plan = await offThread('planImport', [paths, await repo.listing(ref.base_commit), limits, ref.acceptance_tree_dir], call);
    for (const [i, { root, files, links }] of plan.roots.entries()) {
      await offThread('makeFolder', [root], call);
      // Links last, once every file of the root is written: no write can follow one.
      await streamPlanned(repo, files, { file: plan.file, id: plan.id, root: i, kind: 'files' }, call);
      await streamPlanned(repo, links, { file: plan.file, id: plan.id, root: i, kind: 'links' }, call);
    }
  });
  return offThread('finishTree', [paths], call);
}
