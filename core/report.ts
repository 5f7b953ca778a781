/**
 * The batch evaluation report (SPEC section 7). Deterministic: the same runs give the same bytes.
 */
import { canonicalJson } from './canonical';
import type { RunRecord, RunStatus, SubrunCounts } from './contracts';

/** One run of a batch: its record, its epoch, and the first outcome when it was retried. */
export interface EvalRun extends RunRecord {
  epoch: number;
  /** Present when the run was started again after an infrastructure outcome: attempts made and the first outcome. */
  retried?: { attempts: number; first: { status: RunStatus; reason: string | null } };
}

export interface PairSummary {
  fixture: string;
  replay: string | null;
  n: number;
  completed: number;
  pass_at_1: number;
  pass_at_k: number;
  pass_all_k: boolean;
}

export interface EvalReport {
  schema_version: 1;
  runs: EvalRun[];
  summary: {
    runs: number;
    completed: number;
    failed: number;
    /** With more than one epoch: per (fixture, replay) pass rates with k = the number of epochs. */
    epochs?: number;
    per_fixture?: PairSummary[];
    /** Pairs whose replay gave different outcomes across epochs. */
    flaky?: { fixture: string; replay: string | null; outcomes: string[] }[];
    /** Sub-run figures summed over the runs that orchestrated tasks (the mis-dispatch measures among them). */
    subruns?: SubrunCounts;
  };
}

const key = (r: { fixture: string; replay: string | null }) => `${r.fixture}\u0000${r.replay ?? ''}`;
const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
const byRunKey = (a: EvalRun, b: EvalRun): number => cmp(key(a), key(b)) || a.epoch - b.epoch;
const outcomeOf = (r: RunRecord) => (r.reason ? `${r.status}/${r.reason}` : r.status);

/** C(n, k) as a float, exact for the small n of epochs. */
function choose(n: number, k: number): number {
  if (k < 0 || k > n) return 0;
  let c = 1;
  for (let i = 1; i <= k; i++) c = (c * (n - k + i)) / i;
  return c;
}

/** The unbiased pass@k estimator: 1 - C(n-c, k) / C(n, k) for n samples of which c passed. */
export function passAtK(n: number, c: number, k: number): number {
  if (n - c < k) return 1;
  return 1 - choose(n - c, k) / choose(n, k);
}

const round = (x: number) => Math.round(x * 1e6) / 1e6;

export function buildReport(records: EvalRun[]): EvalReport {
  const runs = [...records].sort(byRunKey);
  const completed = runs.filter((r) => r.status === 'completed').length;
  const summary: EvalReport['summary'] = { runs: runs.length, completed, failed: runs.length - completed };
  const orchestrated = runs.filter((r) => r.subruns !== undefined);
  if (orchestrated.length > 0) {
    const sum: SubrunCounts = { dispatched: 0, messages: 0, stops: 0, merges: 0, unknown_task: 0, messages_to_ended: 0 };
    for (const r of orchestrated) for (const k of Object.keys(sum) as (keyof SubrunCounts)[]) sum[k] += r.subruns![k];
    summary.subruns = sum;
  }
  const epochs = runs.reduce((m, r) => Math.max(m, r.epoch), 1);
  if (epochs > 1) {
    const pairs = new Map<string, EvalRun[]>();
    for (const r of runs) pairs.set(key(r), [...(pairs.get(key(r)) ?? []), r]);
    summary.epochs = epochs;
    summary.per_fixture = [...pairs.values()].map((rs) => {
      const c = rs.filter((r) => r.status === 'completed').length;
      return { fixture: rs[0].fixture, replay: rs[0].replay, n: rs.length, completed: c, pass_at_1: round(c / rs.length), pass_at_k: round(passAtK(rs.length, c, Math.min(epochs, rs.length))), pass_all_k: c === rs.length };
    });
    summary.flaky = [...pairs.values()]
      .map((rs) => ({ fixture: rs[0].fixture, replay: rs[0].replay, outcomes: [...new Set(rs.map(outcomeOf))].sort() }))
      .filter((p) => p.outcomes.length > 1);
  }
  return { schema_version: 1, runs, summary };
}

/** report.json's bytes: the report with its fields in SPEC order, two-space indented. */
export function reportJson(report: EvalReport): string {
  // Round-trip through canonical JSON first so no undefined or key-order accident leaks in.
  const ordered = {
    schema_version: report.schema_version,
    runs: report.runs.map((r) => ({
      fixture: r.fixture,
      replay: r.replay,
      epoch: r.epoch,
      status: r.status,
      reason: r.reason,
      writes: r.writes,
      receipts: r.receipts,
      red_observed: r.red_observed,
      diff_paths: r.diff_paths,
      candidate_tests: r.candidate_tests,
      acceptance: r.acceptance,
      tool_errors: JSON.parse(canonicalJson(r.tool_errors)) as Record<string, number>,
      turns: r.turns,
      tool_calls: r.tool_calls,
      repeated_calls: r.repeated_calls,
      empty_replies: r.empty_replies,
      ...(r.usage ? { usage: r.usage } : {}),
      ...(r.subruns ? { subruns: r.subruns, tasks: r.tasks } : {}),
      ...(r.retried ? { retried: r.retried } : {}),
    })),
    summary: report.summary,
  };
  return `${JSON.stringify(ordered, null, 2)}\n`;
}

/** The human-readable report. */
export function reportMarkdown(report: EvalReport): string {
  const s = report.summary;
  const lines = ['# Evaluation report', '', `${s.runs} runs: ${s.completed} completed, ${s.failed} not completed.`, ''];
  if (s.per_fixture) {
    lines.push(`${s.epochs} epochs. Flaky: ${s.flaky!.length === 0 ? 'none' : s.flaky!.map((f) => `${f.fixture}/${f.replay} (${f.outcomes.join(' vs ')})`).join(', ')}.`, '');
    lines.push('| fixture | replay | runs | completed | pass@1 | pass@k | pass all k |', '|---|---|---|---|---|---|---|');
    for (const p of s.per_fixture) lines.push(`| ${p.fixture} | ${p.replay ?? ''} | ${p.n} | ${p.completed} | ${p.pass_at_1} | ${p.pass_at_k} | ${p.pass_all_k ? 'yes' : 'no'} |`);
    lines.push('');
  }
  lines.push(
    '| fixture | replay | epoch | status | reason | writes | receipts | red first | tests (passed/discovered) | acceptance (passed/total) | failed cases | tool errors | retried |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|',
  );
  for (const r of report.runs) {
    const tests = r.candidate_tests ? `${r.candidate_tests.passed}/${r.candidate_tests.discovered}` : '-';
    const acceptance = r.acceptance ? `${r.acceptance.passed}/${r.acceptance.total}` : '-';
    const failed = r.acceptance?.failed.join(', ') || '';
    const errors = Object.entries(r.tool_errors).map(([k, v]) => `${k} ${v}`).join(', ');
    const retried = r.retried ? `${r.retried.attempts} attempts, first ${outcomeOf(r.retried.first as RunRecord)}` : '';
    lines.push(`| ${r.fixture} | ${r.replay ?? ''} | ${r.epoch} | ${r.status} | ${r.reason ?? ''} | ${r.writes} | ${r.receipts} | ${r.red_observed ? 'yes' : 'no'} | ${tests} | ${acceptance} | ${failed} | ${errors} | ${retried} |`);
  }
  return `${lines.join('\n')}\n`;
}

// ---- comparison of two reports ----

export interface Flip {
  fixture: string;
  replay: string | null;
  epoch: number;
  a: string;
  b: string;
  /** `lost`: completed in A, not in B; `gained`: the reverse. */
  direction: 'lost' | 'gained';
}

export interface Comparison {
  runs: number;
  flips: Flip[];
  /** Exact two-sided McNemar p-value over the paired runs (all of them, and per fixture). */
  mcnemar: { b: number; c: number; p: number };
  per_fixture: { fixture: string; b: number; c: number; p: number }[];
}

/** Exact McNemar: a two-sided binomial test of b discordant pairs against c at p = 1/2. */
export function mcnemarExact(b: number, c: number): number {
  const n = b + c;
  if (n === 0) return 1;
  let tail = 0;
  for (let i = 0; i <= Math.min(b, c); i++) tail += choose(n, i);
  return Math.min(1, round((2 * tail) / 2 ** n));
}

const runKey = (r: EvalRun) => `${key(r)}\u0000${r.epoch}`;

/** Pairs the runs of two reports by (fixture, replay, epoch); refuses reports of different run sets. */
export function compareReports(a: EvalReport, b: EvalReport): Comparison {
  const inB = new Map(b.runs.map((r) => [runKey(r), r]));
  const missing = a.runs.filter((r) => !inB.has(runKey(r))).length + b.runs.filter((r) => !new Set(a.runs.map(runKey)).has(runKey(r))).length;
  if (missing > 0 || a.runs.length !== b.runs.length) throw new Error(`the reports do not hold the same runs (${missing} runs are in only one of them): their denominators differ`);
  const flips: Flip[] = [];
  const perFixture = new Map<string, { b: number; c: number }>();
  for (const ra of a.runs) {
    const rb = inB.get(runKey(ra))!;
    const counts = perFixture.get(ra.fixture) ?? { b: 0, c: 0 };
    perFixture.set(ra.fixture, counts);
    const pa = ra.status === 'completed';
    const pb = rb.status === 'completed';
    if (pa === pb) continue;
    if (pa) counts.b++;
    else counts.c++;
    flips.push({ fixture: ra.fixture, replay: ra.replay, epoch: ra.epoch, a: outcomeOf(ra), b: outcomeOf(rb), direction: pa ? 'lost' : 'gained' });
  }
  const bTotal = flips.filter((f) => f.direction === 'lost').length;
  const cTotal = flips.length - bTotal;
  return {
    runs: a.runs.length,
    flips,
    mcnemar: { b: bTotal, c: cTotal, p: mcnemarExact(bTotal, cTotal) },
    per_fixture: [...perFixture.entries()].sort(([x], [y]) => cmp(x, y)).map(([fixture, n]) => ({ fixture, ...n, p: mcnemarExact(n.b, n.c) })),
  };
}
