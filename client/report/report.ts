/**
 * The batch evaluation report (SPEC section 7). Deterministic: the same runs give the same bytes.
 */
import { canonicalJson } from '../../core/canonical';
import type { RecordVerdict, RunRecord, RunStatus, SubrunCounts } from '../../core/contracts';

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
    /** Runs whose verification found flaky tests (failed, then passed when run once more), with the tests. */
    flaky_tests?: { fixture: string; replay: string | null; epoch: number; tests: string[] }[];
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
  const flakyTests = runs.filter((r) => (r.verdict?.flaky.length ?? 0) > 0);
  if (flakyTests.length > 0)
    summary.flaky_tests = flakyTests.map((r) => ({ fixture: r.fixture, replay: r.replay, epoch: r.epoch, tests: r.verdict!.flaky }));
  const epochs = runs.reduce((m, r) => Math.max(m, r.epoch), 1);
  if (epochs > 1) {
    const pairs = new Map<string, EvalRun[]>();
    for (const r of runs) pairs.set(key(r), [...(pairs.get(key(r)) ?? []), r]);
    summary.epochs = epochs;
    summary.per_fixture = [...pairs.values()].map((rs) => {
      const c = rs.filter((r) => r.status === 'completed').length;
      return {
        fixture: rs[0].fixture,
        replay: rs[0].replay,
        n: rs.length,
        completed: c,
        pass_at_1: round(c / rs.length),
        pass_at_k: round(passAtK(rs.length, c, Math.min(epochs, rs.length))),
        pass_all_k: c === rs.length,
      };
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
      unreceipted_changes: r.unreceipted_changes ?? 0,
      ...(r.verdict ? { verdict: r.verdict } : {}),
      ...(r.usage ? { usage: r.usage } : {}),
      ...(r.prompt ? { prompt: r.prompt } : {}),
      ...(r.subruns ? { subruns: r.subruns, tasks: r.tasks } : {}),
      ...(r.tree ? { tree: r.tree } : {}),
      ...(r.cost_limit ? { cost_limit: r.cost_limit } : {}),
      ...(r.trust_repository !== undefined ? { trust_repository: r.trust_repository } : {}),
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
    lines.push(
      `${s.epochs} epochs. Flaky: ${s.flaky!.length === 0 ? 'none' : s.flaky!.map((f) => `${f.fixture}/${f.replay} (${f.outcomes.join(' vs ')})`).join(', ')}.`,
      '',
    );
    lines.push('| fixture | replay | runs | completed | pass@1 | pass@k | pass all k |', '|---|---|---|---|---|---|---|');
    for (const p of s.per_fixture)
      lines.push(
        `| ${p.fixture} | ${p.replay ?? ''} | ${p.n} | ${p.completed} | ${p.pass_at_1} | ${p.pass_at_k} | ${p.pass_all_k ? 'yes' : 'no'} |`,
      );
    lines.push('');
  }
  if (s.flaky_tests)
    lines.push(
      `Flaky tests (failed, then passed when run once more; counted as passing): ${s.flaky_tests.map((f) => `${f.fixture}/${f.replay ?? ''} epoch ${f.epoch}: ${f.tests.join(', ')}`).join('; ')}.`,
      '',
    );
  lines.push(
    '| fixture | replay | epoch | status | reason | writes | receipts | red first | tests (passed/discovered) | verdict | acceptance (passed/total) | failed cases | tool errors | retried |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|',
  );
  for (const r of report.runs) {
    const tests = r.candidate_tests ? `${r.candidate_tests.passed}/${r.candidate_tests.discovered}` : '-';
    const verdict = r.verdict ? verdictText(r.verdict) : '-';
    const acceptance = r.acceptance ? `${r.acceptance.passed}/${r.acceptance.total}` : '-';
    const failed = r.acceptance?.failed.join(', ') || '';
    const errors = Object.entries(r.tool_errors)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ');
    const retried = r.retried ? `${r.retried.attempts} attempts, first ${outcomeOf(r.retried.first as RunRecord)}` : '';
    lines.push(
      `| ${r.fixture} | ${r.replay ?? ''} | ${r.epoch} | ${r.status} | ${r.reason ?? ''} | ${r.writes} | ${r.receipts} | ${r.red_observed ? 'yes' : 'no'} | ${tests} | ${verdict} | ${acceptance} | ${failed} | ${errors} | ${retried} |`,
    );
  }
  return `${lines.join('\n')}\n`;
}

/** A record's verdict in a few words: what decided, and each finding with the tests or paths it names. */
export function verdictText(v: RecordVerdict): string {
  const parts = [`by ${v.decided_by}`];
  const list = (name: string, ids: string[]) => {
    if (ids.length > 0) parts.push(`${name}: ${ids.join(', ')}`);
  };
  if (v.fail_to_pass) parts.push(`FAIL_TO_PASS ${v.fail_to_pass.passed}/${v.fail_to_pass.total}`);
  if (v.pass_to_pass) parts.push(`PASS_TO_PASS ${v.pass_to_pass.passed}/${v.pass_to_pass.total}`);
  list('FAIL_TO_PASS failing', v.fail_to_pass?.failed ?? []);
  list('fixed', v.fixed_tests);
  list('lost', v.tests_lost);
  list('regressed', v.tests_regressed);
  list('new failing', v.new_tests_failed);
  list('flaky', v.flaky);
  list('tampered', v.verification_tampered);
  list('test config changed', v.test_config_changed);
  return parts.join('; ').replaceAll('|', '\\|');
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
  /** The behaviours that matter, their distributions in A and B and the difference, overall and per fixture. */
  behaviours: Behaviours;
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
  const missing =
    a.runs.filter((r) => !inB.has(runKey(r))).length + b.runs.filter((r) => !new Set(a.runs.map(runKey)).has(runKey(r))).length;
  if (missing > 0 || a.runs.length !== b.runs.length)
    throw new Error(`the reports do not hold the same runs (${missing} runs are in only one of them): their denominators differ`);
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
    flips.push({
      fixture: ra.fixture,
      replay: ra.replay,
      epoch: ra.epoch,
      a: outcomeOf(ra),
      b: outcomeOf(rb),
      direction: pa ? 'lost' : 'gained',
    });
  }
  const bTotal = flips.filter((f) => f.direction === 'lost').length;
  const cTotal = flips.length - bTotal;
  const pairs: Pair[] = a.runs.map((ra) => ({ a: ra, b: inB.get(runKey(ra))! }));
  return {
    runs: a.runs.length,
    flips,
    mcnemar: { b: bTotal, c: cTotal, p: mcnemarExact(bTotal, cTotal) },
    per_fixture: [...perFixture.entries()]
      .sort(([x], [y]) => cmp(x, y))
      .map(([fixture, n]) => ({ fixture, ...n, p: mcnemarExact(n.b, n.c) })),
    behaviours: compareBehaviours(pairs),
  };
}

// ---- behaviours: distributions, intervals and differences ----

interface Pair {
  a: EvalRun;
  b: EvalRun;
}

/**
 * A behaviour of a run, as a numerator and a denominator summed over runs: a mean per run is
 * `value / 1`, a rate over calls `errors / calls`. Null when the report lacks the figure.
 */
interface Behaviour {
  key: BehaviourKey;
  label: string;
  /** Digits shown. */
  digits: number;
  of(r: EvalRun): { num: number; den: number } | null;
}

export type BehaviourKey = 'pass_rate' | 'turns' | 'tool_error_rate' | 'repeated_calls' | 'empty_replies' | 'cost_usd';

const figure = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? { num: v, den: 1 } : null);

const BEHAVIOURS: Behaviour[] = [
  { key: 'pass_rate', label: 'pass rate', digits: 3, of: (r) => ({ num: r.status === 'completed' ? 1 : 0, den: 1 }) },
  { key: 'turns', label: 'turns', digits: 2, of: (r) => figure(r.turns) },
  {
    key: 'tool_error_rate',
    label: 'tool error rate',
    digits: 3,
    of: (r) =>
      typeof r.tool_calls === 'number'
        ? { num: Object.values(r.tool_errors).reduce((x: number, y) => x + (y ?? 0), 0), den: r.tool_calls }
        : null,
  },
  { key: 'repeated_calls', label: 'repeated calls', digits: 2, of: (r) => figure(r.repeated_calls) },
  { key: 'empty_replies', label: 'empty replies', digits: 2, of: (r) => figure(r.empty_replies) },
  { key: 'cost_usd', label: 'cost (USD)', digits: 4, of: (r) => figure(r.usage?.cost_usd) },
];

/** A statistic with its 95% interval. */
export interface Estimate {
  value: number;
  low: number;
  high: number;
}

/** One side's distribution of a behaviour over its runs. */
export interface Distribution extends Estimate {
  /** Per-run values (for a rate, each run's own rate): least, median, greatest. */
  min: number;
  median: number;
  max: number;
}

export interface BehaviourComparison {
  key: BehaviourKey;
  label: string;
  /** Null when a report lacks the figure (an older report, or runs without a price for cost). */
  a: Distribution | null;
  b: Distribution | null;
  /** B minus A, over the paired runs. */
  diff: Estimate | null;
  /** True when the interval of the difference lies wholly on one side of zero. */
  outside: boolean;
  /** Why there is no comparison, when there is none. */
  missing: string | null;
}

export interface BehaviourGroup {
  /** Null for all runs together. */
  fixture: string | null;
  runs: number;
  behaviours: BehaviourComparison[];
}

export interface Behaviours {
  /** The interval's confidence, the bootstrap's resamples and the seed of its generator. */
  method: { confidence: number; resamples: number; seed: number; strata: string };
  overall: BehaviourGroup;
  per_fixture: BehaviourGroup[];
}

const RESAMPLES = 2000;
const CONFIDENCE = 0.95;
const SEED = 20240601;

/** A small deterministic generator (mulberry32): the same reports give the same intervals. */
function generator(seed: number): () => number {
  let t = seed >>> 0;
  return () => {
    t = (t + 0x6d2b79f5) >>> 0;
    let x = Math.imul(t ^ (t >>> 15), 1 | t);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

/** A seed from a group's name, so a group's intervals do not depend on which groups came before. */
function seedOf(name: string): number {
  let h = SEED;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 16777619) >>> 0;
  return h;
}

const ratio = (num: number, den: number) => (den === 0 ? 0 : num / den);

function quantile(sorted: number[], q: number): number {
  if (sorted.length === 0) return NaN;
  const at = (sorted.length - 1) * q;
  const lo = Math.floor(at);
  const hi = Math.ceil(at);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (at - lo);
}

/** Rounded off the bootstrap's float noise; never -0 (JSON would say 0). */
const tidy = (x: number) => Math.round(x * 1e9) / 1e9 || 0;

/**
 * Each behaviour of a group of paired runs: A's and B's statistic (a mean per run, or a pooled
 * rate), and B - A, each with a 95% percentile interval from a paired bootstrap that resamples
 * runs within each stratum (a fixture and replay: the runs repeated over epochs), so every
 * stratum keeps its weight and a pair stays a pair. Replays are deterministic: runs that agree
 * across epochs have no spread, and a difference they show has an interval of one point.
 */
function compareGroup(fixture: string | null, pairs: Pair[]): BehaviourGroup {
  // Strata as lists of pair indices; each resample draws as many from each as it holds.
  const strata = new Map<string, number[]>();
  pairs.forEach((p, i) => strata.set(key(p.a), [...(strata.get(key(p.a)) ?? []), i]));
  const groups = [...strata.values()];
  const behaviours = BEHAVIOURS.map((bh, index): BehaviourComparison => {
    const base = { key: bh.key, label: bh.label };
    const a = pairs.map((p) => bh.of(p.a));
    const b = pairs.map((p) => bh.of(p.b));
    const lacking = [a.includes(null) ? 'A' : null, b.includes(null) ? 'B' : null].filter(Boolean);
    if (lacking.length > 0) {
      const why = bh.key === 'cost_usd' ? 'runs without a priced usage' : 'no such figure in its runs (an older report)';
      return { ...base, a: null, b: null, diff: null, outside: false, missing: `${lacking.join(' and ')}: ${why}` };
    }
    const [aNum, aDen, bNum, bDen] = [a.map((v) => v!.num), a.map((v) => v!.den), b.map((v) => v!.num), b.map((v) => v!.den)];
    const random = generator(seedOf(`${fixture ?? ''}\u0000${index}`));
    const draws = { a: new Array<number>(RESAMPLES), b: new Array<number>(RESAMPLES), d: new Array<number>(RESAMPLES) };
    for (let r = 0; r < RESAMPLES; r++) {
      let an = 0;
      let ad = 0;
      let bn = 0;
      let bd = 0;
      for (const g of groups) {
        for (let j = 0; j < g.length; j++) {
          const i = g[Math.floor(random() * g.length)];
          an += aNum[i];
          ad += aDen[i];
          bn += bNum[i];
          bd += bDen[i];
        }
      }
      draws.a[r] = ratio(an, ad);
      draws.b[r] = ratio(bn, bd);
      draws.d[r] = draws.b[r] - draws.a[r];
    }
    const sum = (xs: number[]) => xs.reduce((x, y) => x + y, 0);
    const interval = (xs: number[], value: number): Estimate => {
      const sorted = [...xs].sort((x, y) => x - y);
      return {
        value: tidy(value),
        low: tidy(quantile(sorted, (1 - CONFIDENCE) / 2)),
        high: tidy(quantile(sorted, 1 - (1 - CONFIDENCE) / 2)),
      };
    };
    const distribution = (num: number[], den: number[], draw: number[]): Distribution => {
      const per = num.map((n, i) => ratio(n, den[i])).sort((x, y) => x - y);
      return {
        ...interval(draw, ratio(sum(num), sum(den))),
        min: tidy(per[0]),
        median: tidy(quantile(per, 0.5)),
        max: tidy(per[per.length - 1]),
      };
    };
    const da = distribution(aNum, aDen, draws.a);
    const db = distribution(bNum, bDen, draws.b);
    const diff = interval(draws.d, ratio(sum(bNum), sum(bDen)) - ratio(sum(aNum), sum(aDen)));
    // A single pair has no spread to judge by: nothing is marked on one run.
    const outside = pairs.length >= 2 && (diff.low > 0 || diff.high < 0);
    return { ...base, a: da, b: db, diff, outside, missing: null };
  });
  return { fixture, runs: pairs.length, behaviours };
}

function compareBehaviours(pairs: Pair[]): Behaviours {
  const fixtures = [...new Set(pairs.map((p) => p.a.fixture))].sort(cmp);
  return {
    method: { confidence: CONFIDENCE, resamples: RESAMPLES, seed: SEED, strata: 'fixture and replay' },
    overall: compareGroup(null, pairs),
    per_fixture: fixtures.map((f) =>
      compareGroup(
        f,
        pairs.filter((p) => p.a.fixture === f),
      ),
    ),
  };
}

const signed = (x: number, digits: number) => `${x >= 0 ? '+' : ''}${x.toFixed(digits)}`;

/** One behaviour as a line of text: A and B with their intervals, B - A with its own, `*` outside. */
export function behaviourLine(c: BehaviourComparison): string {
  const bh = BEHAVIOURS.find((x) => x.key === c.key)!;
  const n = bh.digits;
  const name = c.label.padEnd(16);
  if (c.a === null || c.b === null || c.diff === null) return `  ${name} - (${c.missing})`;
  const side = (d: Distribution) =>
    `${d.value.toFixed(n)} [${d.low.toFixed(n)}, ${d.high.toFixed(n)}] (${d.min.toFixed(n)}..${d.max.toFixed(n)})`;
  return `${c.outside ? '*' : ' '} ${name} A ${side(c.a)}   B ${side(c.b)}   B-A ${signed(c.diff.value, n)} [${signed(c.diff.low, n)}, ${signed(c.diff.high, n)}]`;
}

/** The behaviour part of `eval compare`'s text. */
export function behavioursText(b: Behaviours): string[] {
  const lines = [
    `behaviours: the statistic over runs [${Math.round(b.method.confidence * 100)}% interval] (least..greatest run); intervals from ${b.method.resamples} paired bootstrap resamples of the runs within each ${b.method.strata}; * marks a difference whose interval excludes 0`,
  ];
  for (const g of [b.overall, ...b.per_fixture]) {
    lines.push(`${g.fixture ?? 'overall'} (${g.runs} paired runs)`);
    for (const c of g.behaviours) lines.push(behaviourLine(c));
  }
  const outside = [b.overall, ...b.per_fixture].flatMap((g) =>
    g.behaviours.filter((c) => c.outside).map((c) => `${g.fixture ?? 'overall'} ${c.label} ${signed(c.diff!.value, 3)}`),
  );
  lines.push(outside.length === 0 ? 'no difference outside its interval' : `differences outside their interval: ${outside.join('; ')}`);
  return lines;
}
