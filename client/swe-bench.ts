/**
 * SWE-bench's files, both ways. An instance file (a JSON array or JSONL of `instance_id`, `repo`,
 * `base_commit`, `problem_statement`, `FAIL_TO_PASS`, `PASS_TO_PASS`, `test_patch`, `patch`; other
 * fields are ignored) becomes a batch of repository tasks: each repository is a local folder or
 * mirror under `--repos` (nothing is fetched), the problem statement is the task, and the test
 * patch with the two lists goes to a verdict file the worker reads for verification only (the
 * model never sees it). The decisions are a model's (a live batch), each instance's `patch`
 * (`--gold`: every gold patch must resolve), or another system's predictions (`--predictions`:
 * `instance_id`, `model_name_or_path`, `model_patch`), each made into a replay of `apply_patch`
 * calls. After a batch, its runs' changes are written back as a predictions file.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { z } from 'zod';
import { COMMIT_ID, FIXTURE_ID, testsSchema, type Replay, type RepoSource, type VerdictFile } from '../core/contracts';
import { applyUnifiedDiff, patchPaths, PatchError } from '../core/unified-diff';
import { formatIssues } from '../core/validate';
import { writeFileAtomic } from '../host/files';
import { GitError, type GitRepository } from '../workspace/git';
import { entriesOf, withRepository } from '../workspace/repository';
import type { Settings } from '../host/settings';
import type { RepositoryRead } from '../sandbox/git-sandbox';
import { RefusedInput } from './command';
import { checkRepositoryRun, repositoryReaders } from './repository-run';

/** A list of test ids, as SWE-bench's files have it: a JSON array, or a string holding one. */
const testIds = z.union([
  z.array(z.string().min(1)),
  z.string().transform((text, ctx) => {
    try {
      return z.array(z.string().min(1)).parse(JSON.parse(text));
    } catch {
      ctx.addIssue({ code: 'custom', message: 'a list of test ids (a JSON array, or a string holding one)' });
      return z.NEVER;
    }
  }),
]);

export const instanceSchema = z.object({
  instance_id: z.string().regex(FIXTURE_ID, 'lowercase letters, digits, . _ - (at most 64): it names the run'),
  repo: z.string().regex(/^[A-Za-z0-9_.-]+\/[A-Za-z0-9_.-]+$/, 'owner/name'),
  base_commit: z.string().regex(COMMIT_ID, 'a full commit id'),
  problem_statement: z.string().min(1),
  FAIL_TO_PASS: testIds,
  PASS_TO_PASS: testIds,
  test_patch: z.string(),
  patch: z.string(),
  /** This harness's addition: the test command, when the repository's settings or detection would not find it. */
  tests: testsSchema.optional(),
});
export type Instance = z.infer<typeof instanceSchema>;

export const predictionSchema = z.object({
  instance_id: z.string().min(1),
  model_name_or_path: z.string().min(1),
  model_patch: z.string().nullable(),
});
export type Prediction = z.infer<typeof predictionSchema>;

/** The objects of a JSON array file or a JSONL file, each with where it is (for messages). */
function records(file: string): { where: string; value: unknown }[] {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new RefusedInput(`cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  if (text.trimStart().startsWith('[')) {
    let all: unknown;
    try {
      all = JSON.parse(text);
    } catch (err) {
      throw new RefusedInput(`${file}: not JSON: ${(err as Error).message}`);
    }
    return (all as unknown[]).map((value, i) => ({ where: `${file} item ${i + 1}`, value }));
  }
  return text
    .split('\n')
    .map((line, i) => ({ line, where: `${file} line ${i + 1}` }))
    .filter(({ line }) => line.trim() !== '')
    .map(({ line, where }) => {
      try {
        return { where, value: JSON.parse(line) as unknown };
      } catch (err) {
        throw new RefusedInput(`${where}: not JSON: ${(err as Error).message}`);
      }
    });
}

function parsed<T>(schema: z.ZodType<T>, r: { where: string; value: unknown }): T {
  const got = schema.safeParse(r.value);
  if (!got.success) throw new RefusedInput(`${r.where}: ${formatIssues(got.error)}`);
  return got.data;
}

export function readInstances(file: string): Instance[] {
  const seen = new Set<string>();
  return records(file).map((r) => {
    const instance = parsed(instanceSchema, r);
    if (seen.has(instance.instance_id)) throw new RefusedInput(`${r.where}: instance_id ${instance.instance_id} is there twice`);
    seen.add(instance.instance_id);
    return instance;
  });
}

export function readPredictions(file: string): Prediction[] {
  const seen = new Set<string>();
  return records(file).map((r) => {
    const p = parsed(predictionSchema, r);
    const key = `${p.instance_id}\u0000${p.model_name_or_path}`;
    if (seen.has(key)) throw new RefusedInput(`${r.where}: ${p.instance_id} of ${p.model_name_or_path} is there twice`);
    seen.add(key);
    return p;
  });
}

/** The local repository of `owner/name` under `reposDir`: `owner__name` (SWE-bench's own naming) or `owner/name`, each may end in `.git`. */
export function repositoryFolder(reposDir: string, repo: string): string {
  const [owner, name] = repo.split('/');
  const candidates = [`${owner}__${name}`, join(owner, name)].flatMap((c) => [c, `${c}.git`]).map((c) => join(resolve(reposDir), c));
  const found = candidates.find((c) => existsSync(c));
  if (found === undefined)
    throw new RefusedInput(
      `no local repository for ${repo} under ${reposDir} (looked for ${owner}__${name} and ${owner}/${name}, with or without .git): nothing is fetched`,
    );
  return found;
}

/** A name usable as a replay's name (a model name or path has slashes and more). */
export function replayName(model: string): string {
  const name = model
    .replace(/[^A-Za-z0-9._-]+/g, '-')
    .replace(/^[^A-Za-z0-9]+/, '')
    .slice(0, 64);
  return name === '' ? 'prediction' : name;
}

const sha256 = (text: string) => createHash('sha256').update(text, 'utf8').digest('hex');

const occurrences = (text: string, part: string) => {
  let n = 0;
  for (let at = text.indexOf(part); at >= 0 && n < 2; at = text.indexOf(part, at + 1)) n++;
  return n;
};

/**
 * One apply_patch edit that turns `before` into `after`: the lines between their common head and
 * tail, with as many lines around them as make the old text occur once (the whole file at most).
 */
export function fileEdit(before: string, after: string): { old: string; new: string } {
  const a = before.split(/(?<=\n)/);
  const b = after.split(/(?<=\n)/);
  let head = 0;
  while (head < a.length && head < b.length && a[head] === b[head]) head++;
  let tail = 0;
  while (tail < a.length - head && tail < b.length - head && a[a.length - 1 - tail] === b[b.length - 1 - tail]) tail++;
  for (let context = 0; ; context++) {
    const from = Math.max(0, head - context);
    const keepTail = Math.max(0, tail - context);
    const old = a.slice(from, a.length - keepTail).join('');
    if ((old !== '' && occurrences(before, old) === 1) || (from === 0 && keepTail === 0))
      return { old, new: b.slice(from, b.length - keepTail).join('') };
  }
}

/**
 * A patch (gold or predicted) as a replay: one apply_patch per file, against the files of the
 * base commit, then `final`. A patch that deletes a file, or does not apply to the base, is
 * refused naming the instance (a run writes files; it never deletes one).
 */
export async function patchReplay(repo: GitRepository, baseCommit: string, patch: string, what: string): Promise<Replay> {
  const before = new Map<string, string>();
  let files;
  try {
    const wanted = new Set(patchPaths(patch));
    const oids = new Map<string, string>();
    const listed = await entriesOf(repo, baseCommit, [...wanted]);
    if (!listed.ok) throw new RefusedInput(`${what}: ${listed.detail}`);
    for (const e of listed.entries) if (e.type === 'blob') oids.set(e.oid, e.path);
    await repo.readBlobs([...oids.keys()], (oid, bytes) => void before.set(oids.get(oid)!, bytes.toString('utf8')));
    files = applyUnifiedDiff(patch, (path) => before.get(path) ?? null);
  } catch (err) {
    if (err instanceof PatchError || err instanceof GitError) throw new RefusedInput(`${what}: ${err.message}`);
    throw err;
  }
  const decisions: Replay['decisions'] = [];
  files.forEach((f, i) => {
    if (f.after === null) throw new RefusedInput(`${what}: the patch deletes ${f.path}; a run writes files, it never deletes one`);
    if (f.before === '') throw new RefusedInput(`${what}: the patch writes into the empty file ${f.path}, which apply_patch cannot match`);
    const edit = f.before === null ? { old: '', new: f.after } : fileEdit(f.before, f.after);
    decisions.push({
      kind: 'tool',
      call: {
        call_id: `patch-${i + 1}`,
        name: 'apply_patch',
        arguments: { path: f.path, version: f.before === null ? 'absent' : sha256(f.before), ...edit },
      },
    });
  });
  decisions.push({ kind: 'final', text: `${what}: the patch applied to ${files.map((f) => f.path).join(', ') || 'no file'}` });
  return { schema_version: 1, decisions };
}

export interface PlannedInstance {
  repo: RepoSource;
  replays: { name: string; path: string }[];
}

/**
 * The instances as repository tasks, each checked like `run <repo>`; their verdict files and
 * replays written under `dir` (the batch's output folder). `decisions`: `gold`, the predictions,
 * or `live` (a model decides; no replay).
 */
export async function planInstances(
  instancesFile: string,
  reposDir: string,
  dir: string,
  decisions: { kind: 'gold' } | { kind: 'predictions'; file: string } | { kind: 'live' },
  o: { settings: Settings; read: RepositoryRead; credentialsFile: string | null },
): Promise<PlannedInstance[]> {
  const instances = readInstances(resolve(instancesFile));
  const predictions = decisions.kind === 'predictions' ? readPredictions(resolve(decisions.file)) : [];
  const known = new Set(instances.map((i) => i.instance_id));
  const stray = predictions.find((p) => !known.has(p.instance_id));
  if (stray)
    throw new RefusedInput(
      `${decisions.kind === 'predictions' ? decisions.file : ''}: ${stray.instance_id} is no instance of ${instancesFile}`,
    );
  const out = join(resolve(dir), 'instances');
  mkdirSync(out, { recursive: true });
  const planned: PlannedInstance[] = [];
  for (const instance of instances) {
    const id = instance.instance_id;
    const path = repositoryFolder(reposDir, instance.repo);
    let checked;
    try {
      checked = await checkRepositoryRun({
        path,
        task: instance.problem_statement,
        base: instance.base_commit,
        id,
        tests: instance.tests,
        credentialsFile: o.credentialsFile,
        settings: o.settings,
        read: o.read,
      });
    } catch (err) {
      if (err instanceof RefusedInput) throw new RefusedInput(`${instancesFile} (instance ${id}): ${err.message}`);
      throw err;
    }
    const verdict: VerdictFile = {
      schema_version: 1,
      fail_to_pass: instance.FAIL_TO_PASS,
      pass_to_pass: instance.PASS_TO_PASS,
      test_patch: instance.test_patch === '' ? null : instance.test_patch,
    };
    // One folder per instance: a replay's name in records is its file's name.
    const folder = join(out, id);
    mkdirSync(join(folder, 'replays'), { recursive: true });
    const verdictFile = join(folder, 'verdict.json');
    writeFileAtomic(verdictFile, `${JSON.stringify(verdict)}\n`);
    const patches: { name: string; patch: string; what: string }[] =
      decisions.kind === 'gold'
        ? [{ name: 'gold', patch: instance.patch, what: `the gold patch of ${id}` }]
        : decisions.kind === 'predictions'
          ? predictions
              .filter((p) => p.instance_id === id)
              .sort((x, y) => (x.model_name_or_path < y.model_name_or_path ? -1 : 1))
              .map((p, _, all) => {
                const name = replayName(p.model_name_or_path);
                if (all.filter((q) => replayName(q.model_name_or_path) === name).length > 1)
                  throw new RefusedInput(
                    `${decisions.file}: two predictions of ${id} have models named alike (${name}); give them distinct names`,
                  );
                return { name, patch: p.model_patch ?? '', what: `${p.model_name_or_path}'s patch of ${id}` };
              })
          : [];
    // The base's files are read where the run reads them: in the reading container unless trusted.
    const replays = await withRepository(repositoryReaders(o.settings)(o.read), path, o.settings.repositoryLimits, async (repo) => {
      const written: { name: string; path: string }[] = [];
      for (const { name, patch, what } of patches) {
        const file = join(folder, 'replays', `${name}.json`);
        writeFileAtomic(file, `${JSON.stringify(await patchReplay(repo, checked.source.base_commit, patch, what), null, 2)}\n`);
        written.push({ name, path: file });
      }
      return written;
    });
    planned.push({ repo: { ...checked.source, verdict_file: verdictFile }, replays });
  }
  return planned;
}

/** predictions.jsonl: one line per run, SWE-bench's three fields (written whole). */
export function writePredictions(file: string, rows: Prediction[]): void {
  writeFileAtomic(file, rows.map((r) => JSON.stringify(r)).join('\n') + (rows.length ? '\n' : ''));
}
