/**
 * A batch of tasks on repositories (SPEC section 10): a JSONL file, one task a line,
 * `{"id", "repo", "base", "task", "tests"?, "acceptance"?, "replays"?}` (the shape of
 * SWE-bench-style instance lists). Paths are relative to the file's folder. Every task is
 * checked as `run <repo>` checks one (repository, ref, settings, test command) before the batch
 * starts; the first fault refuses the whole batch, naming its line and field.
 */
import { readFileSync } from 'node:fs';
import { dirname, isAbsolute, join } from 'node:path';
import { z } from 'zod';
import { acceptanceSchema, FIXTURE_ID, testsSchema, type RepoSource } from '../core/contracts';
import { formatIssues } from '../core/validate';
import { RefusedInput } from './command';
import { checkRepositoryRun } from './repository-run';
import type { Settings } from '../host/settings';
import type { RepositoryRead } from '../sandbox/git-sandbox';

const taskLineSchema = z.strictObject({
  id: z.string().regex(FIXTURE_ID, 'lowercase letters, digits, . _ - (at most 64), as a fixture id'),
  repo: z.string().min(1),
  base: z.string().min(1),
  task: z.string().min(1),
  tests: testsSchema.optional(),
  acceptance: acceptanceSchema.extend({ dir: z.string().min(1) }).optional(),
  /** Replay names to replay files. */
  replays: z
    .record(z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, 'a replay name: letters, digits, . _ -'), z.string().min(1))
    .optional(),
});

export interface PlannedTask {
  repo: RepoSource;
  replays: { name: string; path: string }[];
}

/** The tasks of a JSONL file, each checked (named credentials against `credentialsFile`, when given), with paths made absolute. */
export async function readTasksFile(
  file: string,
  o: { settings: Settings; read: RepositoryRead; credentialsFile: string | null },
): Promise<PlannedTask[]> {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new RefusedInput(`cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  const base = dirname(file);
  const at = (p: string) => (isAbsolute(p) ? p : join(base, p));
  const seen = new Set<string>();
  const tasks: PlannedTask[] = [];
  for (const [i, line] of text.split('\n').entries()) {
    if (line.trim() === '') continue;
    const where = `${file} line ${i + 1}`;
    let raw: unknown;
    try {
      raw = JSON.parse(line);
    } catch (err) {
      throw new RefusedInput(`${where}: not JSON: ${(err as Error).message}`);
    }
    const parsed = taskLineSchema.safeParse(raw);
    if (!parsed.success) throw new RefusedInput(`${where}: ${formatIssues(parsed.error)}`);
    const t = parsed.data;
    if (seen.has(t.id)) throw new RefusedInput(`${where}: id: ${t.id} is the id of an earlier task`);
    seen.add(t.id);
    let checked;
    try {
      checked = await checkRepositoryRun({
        path: at(t.repo),
        task: t.task,
        base: t.base,
        id: t.id,
        tests: t.tests,
        acceptance: t.acceptance ? { ...t.acceptance, dir: at(t.acceptance.dir) } : undefined,
        credentialsFile: o.credentialsFile,
        settings: o.settings,
        read: o.read,
      });
    } catch (err) {
      if (err instanceof RefusedInput) throw new RefusedInput(`${where} (task ${t.id}): ${err.message}`);
      throw err;
    }
    const replays = Object.entries(t.replays ?? {})
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([name, path]) => ({ name, path: at(path) }));
    tasks.push({ repo: checked.source, replays });
  }
  return tasks;
}
