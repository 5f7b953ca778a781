/**
 * The verdict by named tests (SPEC section 6), the pure part: which tests a run must keep
 * passing, which of them to run once more, and what the outcomes at the base, at the end and on
 * that second run decide. The verifier (sandbox/verifier.ts) runs the tests; this judges them.
 *
 * - With the task's own FAIL_TO_PASS / PASS_TO_PASS ids (`task`): each must be discovered and pass.
 * - Otherwise, with usable outcomes at the base (`base`): every test that passed there must be
 *   discovered and pass, and a test the base did not have must not fail (the run's own tests).
 *   Tests that failed at the base may still fail; those that pass now are `fixed_tests`.
 * - Without usable base outcomes (`counts`): every test must pass, as before named tests.
 * In each, at least one test must be discovered (the zero-test guard).
 */
import { NAMED_MAX, type BaseTests, type NamedCheck, type TestCase, type TestVerdict } from './contracts';

/** The outcomes of one test run as the verdict reads them. */
export interface RunOutcomes {
  /** The runner's status (`passed`, `failed`, `no_tests`, `timeout`, `cancelled`, `error`). */
  status: string;
  tests: TestCase[];
}

export interface VerdictInputs {
  base: (BaseTests & { tests: TestCase[] }) | null;
  end: RunOutcomes;
  /** The outcomes of running the failing expected tests once more (null: not run). */
  rerun: RunOutcomes | null;
  task: { fail_to_pass?: string[]; pass_to_pass?: string[]; tests_may_change?: boolean };
  /** Whether a file exists at the end (for `tests_may_change`: a test whose file is gone is removed, not lost). */
  fileExists: (path: string) => boolean;
}

/** A report that could be read: its tests are the run's (a timeout, a cancellation or an unusable report have none). */
export const usable = (status: string) => status === 'passed' || status === 'failed' || status === 'no_tests';

const PASSING = new Set(['passed']);
const FAILING = new Set(['failed', 'error']);

const byId = (tests: TestCase[]) => new Map(tests.map((t) => [t.id, t.outcome]));

/** What decides, given the base's outcomes and the task. */
export function decidedBy(base: { status: string } | null, task: VerdictInputs['task']): TestVerdict['decided_by'] {
  if (task.fail_to_pass !== undefined || task.pass_to_pass !== undefined) return 'task';
  return base !== null && usable(base.status) ? 'base' : 'counts';
}

/** The tests that must pass at the end and are not passing there: the ones run once more. */
export function toRunAgain(inputs: Omit<VerdictInputs, 'rerun' | 'fileExists'>): string[] {
  if (!usable(inputs.end.status)) return [];
  const end = byId(inputs.end.tests);
  const expected = expectedPassing(inputs);
  return expected.filter((id) => end.has(id) && !PASSING.has(end.get(id)!));
}

/** PASS_TO_PASS: the task's, or (when it names none) the tests that passed at the base. */
function expectedPassing(inputs: Pick<VerdictInputs, 'base' | 'task'>): string[] {
  if (inputs.task.pass_to_pass !== undefined) return [...new Set(inputs.task.pass_to_pass)];
  if (inputs.base !== null && usable(inputs.base.status)) return inputs.base.tests.filter((t) => PASSING.has(t.outcome)).map((t) => t.id);
  return [];
}

/** The file a test id names (pytest's node ids), or null when its runner names none. */
export function testFile(id: string): string | null {
  const at = id.indexOf('::');
  const head = at < 0 ? id : id.slice(0, at);
  return /\.py$/.test(head) && !head.startsWith('/') ? head : null;
}

const named = (ids: string[]) => ids.slice(0, NAMED_MAX);

export function decideVerdict(inputs: VerdictInputs): { ok: boolean; verdict: TestVerdict } {
  const by = decidedBy(inputs.base, inputs.task);
  const end = byId(inputs.end.tests);
  const again = inputs.rerun && usable(inputs.rerun.status) ? byId(inputs.rerun.tests) : new Map<string, string>();
  const endUsable = usable(inputs.end.status);
  const discovered = inputs.end.tests.length;

  const lost: string[] = [];
  const regressed: string[] = [];
  const flaky: string[] = [];
  const removed: string[] = [];
  const judge = (id: string) => {
    const outcome = end.get(id);
    if (outcome === undefined) {
      const file = testFile(id);
      if (inputs.task.tests_may_change && file !== null && !inputs.fileExists(file)) removed.push(id);
      else lost.push(id);
    } else if (!PASSING.has(outcome)) {
      if (again.get(id) === 'passed') flaky.push(id);
      else regressed.push(id);
    }
  };
  const expected = endUsable ? expectedPassing(inputs) : [];
  for (const id of expected) judge(id);

  let failToPass: NamedCheck | null = null;
  let passToPass: NamedCheck | null = null;
  if (by === 'task') {
    const f2p = [...new Set(inputs.task.fail_to_pass ?? [])];
    const f2pFailed = f2p.filter((id) => end.get(id) !== 'passed');
    for (const id of f2p) if (!end.has(id) && endUsable) lost.push(id);
    failToPass = { total: f2p.length, passed: f2p.length - f2pFailed.length, failed: named(f2pFailed) };
    const p2pFailed = expected.filter((id) => end.get(id) !== 'passed' && again.get(id) !== 'passed');
    passToPass = { total: expected.length, passed: expected.length - p2pFailed.length, failed: named(p2pFailed) };
  }

  const baseOutcomes = inputs.base && usable(inputs.base.status) ? byId(inputs.base.tests) : null;
  const fixed = baseOutcomes
    ? inputs.end.tests.filter((t) => t.outcome === 'passed' && FAILING.has(baseOutcomes.get(t.id) ?? '')).map((t) => t.id)
    : [];
  const newFailed =
    by === 'base' && baseOutcomes ? inputs.end.tests.filter((t) => FAILING.has(t.outcome) && !baseOutcomes.has(t.id)).map((t) => t.id) : [];

  let ok: boolean;
  if (!endUsable || discovered === 0) ok = false;
  else if (by === 'counts') ok = inputs.end.status === 'passed';
  else if (by === 'base') ok = lost.length === 0 && regressed.length === 0 && newFailed.length === 0;
  else ok = lost.length === 0 && regressed.length === 0 && failToPass!.failed.length === 0;

  const verdict: TestVerdict = {
    decided_by: by,
    base: inputs.base
      ? { status: inputs.base.status, outcomes: inputs.base.outcomes, tests_ref: inputs.base.tests_ref, cached: inputs.base.cached }
      : null,
    fixed_tests: named(fixed),
    tests_lost: named(lost),
    tests_regressed: named(regressed),
    new_tests_failed: named(newFailed),
    flaky: named(flaky),
    tests_removed: named(removed),
    fail_to_pass: failToPass,
    pass_to_pass: passToPass,
    counts: {
      fixed_tests: fixed.length,
      tests_lost: lost.length,
      tests_regressed: regressed.length,
      new_tests_failed: newFailed.length,
      flaky: flaky.length,
      tests_removed: removed.length,
    },
    decision: '',
  };
  verdict.decision = describe(verdict, expected.length, inputs, ok, discovered);
  return { ok, verdict };
}

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;

function describe(v: TestVerdict, expected: number, inputs: VerdictInputs, ok: boolean, discovered: number): string {
  const parts: string[] = [];
  if (!usable(inputs.end.status)) parts.push(`the tests at the end gave no usable outcome (${inputs.end.status})`);
  else if (discovered === 0) parts.push('no test was discovered at the end');
  else if (v.decided_by === 'counts')
    parts.push(
      `no usable outcome at the base${inputs.base ? ` (${inputs.base.status})` : ''}: every test must pass, ${inputs.end.status === 'passed' ? 'and every one did' : 'and not every one did'}`,
    );
  else if (v.decided_by === 'task') {
    const f = v.fail_to_pass!;
    parts.push(`decided by the task's tests: FAIL_TO_PASS ${f.passed}/${f.total} pass`);
    parts.push(`PASS_TO_PASS ${v.pass_to_pass!.passed}/${v.pass_to_pass!.total} pass`);
  } else parts.push(`decided by the ${plural(expected, 'test')} that passed at the base`);
  if (v.counts.tests_lost) parts.push(`${v.counts.tests_lost} lost`);
  if (v.counts.tests_regressed) parts.push(`${v.counts.tests_regressed} regressed`);
  if (v.counts.new_tests_failed) parts.push(`${plural(v.counts.new_tests_failed, 'new test')} failing`);
  if (v.counts.fixed_tests) parts.push(`${v.counts.fixed_tests} fixed`);
  if (v.counts.flaky) parts.push(`${plural(v.counts.flaky, 'flaky test')} (failed, then passed when run once more) counted as passing`);
  if (v.counts.tests_removed) parts.push(`${v.counts.tests_removed} removed with their files (the task lets tests change)`);
  return `${parts.join('; ')}: ${ok ? 'passed' : 'failed'}`;
}
