/**
 * A batch's plan: fixtures (or tasks on repositories), their replays, epochs and one
 * configuration. Run `i` of a batch is a pure function of the plan, and each attempt of it has a
 * workflow id made of its key.
 */
import type { RepoSource } from './contracts';

/** A fixture folder, or a task on a repository (`repo`, whose `id` names it; `dir` is then its repository). */
export interface PlannedEntry {
  dir: string;
  repo?: RepoSource;
  replays: { path: string; name: string; trusted: boolean }[];
}

/** What names an entry in records and run ids: a task's id, or a fixture's folder name. */
export function entryName(entry: PlannedEntry): string {
  return entry.repo?.id ?? entry.dir.split('/').filter(Boolean).pop() ?? 'fixture';
}

export interface EvalPlan {
  fixtures: PlannedEntry[];
  epochs: number;
  backend: 'local' | 'docker';
  approver: string;
  host_lost_s?: number;
  /**
   * A live batch: every entry is decided by this endpoint and model (and prompt version) instead of
   * its replays; each entry then has the one pseudo-replay `LIVE_REPLAY`.
   */
  live?: { endpoint: string; model: string; prompt?: string };
}

/** The name a live batch's runs have in workflow ids; their records say `replay: null`, as `run --wait` does. */
export const LIVE_REPLAY = 'live';

export interface PlannedRun {
  index: number;
  fixture: number;
  replay: number;
  epoch: number;
}

/** Run `index` of the plan: epochs outermost, so the first epoch of every pair runs first. */
export function plannedRun(plan: EvalPlan, index: number): PlannedRun {
  const pairs = plan.fixtures.flatMap((f, fi) => f.replays.map((_, ri) => [fi, ri] as const));
  const [fixture, replay] = pairs[index % pairs.length];
  return { index, fixture, replay, epoch: Math.floor(index / pairs.length) + 1 };
}

export function planSize(plan: EvalPlan): number {
  return plan.fixtures.reduce((n, f) => n + f.replays.length, 0) * plan.epochs;
}

/** The child workflow id of a run's attempt: its key in the batch. */
export function runWorkflowId(batch: string, plan: EvalPlan, run: PlannedRun, attempt: number): string {
  const fixture = plan.fixtures[run.fixture];
  const name = entryName(fixture);
  return `${batch}/${name}/${fixture.replays[run.replay].name}/e${run.epoch}${attempt > 1 ? `~${attempt}` : ''}`;
}
