/**
 * A batch's plan: fixtures (or tasks on repositories), their replays, epochs and one
 * configuration. Run `i` of a batch is a pure function of the plan, and each attempt of it has a
 * workflow id made of its key.
 */
import type { RepoSource, RunStatus } from './contracts';

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
  /** The user lets every run change its test configuration (`--allow-test-config-change`). */
  allow_test_config_change?: boolean;
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

/** What agentEval takes, answers and shows while it runs. */
export interface EvalInput {
  plan: EvalPlan;
  concurrency: number;
  /**
   * Per run index, the attempt to start ('1'-'9'), or '0' to keep what an earlier attempt left
   * (a resume). Absent: every run starts its first attempt.
   */
  attempts?: string;
  /** Where the command line writes the report (shown in the result). */
  out?: string | null;
}

export interface EvalProgress {
  total: number;
  /** Runs with an outcome, including those kept from earlier attempts. */
  done: number;
  completed: number;
  running: number;
  /** Runs kept from an earlier attempt (a resume). */
  kept: number;
  by_status: Partial<Record<RunStatus, number>>;
  segment: number;
  /** Seconds since this batch (or its resume) started, and the estimate of what is left. */
  elapsed_s: number;
  eta_s: number | null;
}

export interface EvalResult {
  progress: EvalProgress;
  out: string | null;
}
