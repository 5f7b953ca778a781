/**
 * Runs a fixture's candidate tests through a backend and reads the counts and each test's
 * outcome from the JUnit report (pytest's --junitxml, Node's junit reporter, or for the junit
 * format whatever runner the fixture names, writing to {junit}). The run_tests tool runs them in
 * the workspace, and whatever they change there is undone (workspace/byproducts.ts); the
 * verifier and the base run run them in copies of their own (`runTestsIn`). The report is read as
 * the sandbox left it: never through a link, never waiting on a FIFO, its size capped first.
 */
import { mkdirSync, mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import { JUNIT_PLACEHOLDER, noOutcomes, type OutcomeCounts, type TestCase, type TestsSpec } from '../core/contracts';
import { testFile } from '../core/verdict';
import { readHostile } from '../workspace/hostile-read';
import type { ExecBackend } from './backends/types';
import { tailBytes } from './backends/capped-output';
import type { Undone } from '../workspace/byproducts';
import { withUndo } from '../workspace/undo';
import { offThread } from '../workspace/thread';
import type { Limits } from '../core/limits';
import { nonRetryable } from '../core/failures';
import { parseJunit } from './junit';
import { execWithinDisk, overLimitDetail } from './disk-bound';
import { onDisk } from '../host/disk';
import type { RunPaths } from '../workspace/workspace';

export type TestStatus = 'passed' | 'failed' | 'no_tests' | 'timeout' | 'cancelled' | 'error';

export interface TestRunData {
  status: TestStatus;
  exit_code: number | null;
  discovered: number;
  passed: number;
  failed: number;
  /** Each outcome's count (failed and error together are `failed` above; skipped and xfail are neither). */
  outcomes: OutcomeCounts;
  failures: { test: string; message: string }[];
  output_tail: string;
  /** Why the output is unusable, for status `error`. */
  detail?: string;
  /** What the test run changed in the workspace, undone before this result (absent: nothing). */
  unreceipted?: Undone;
  /**
   * Every test with its outcome. run_tests keeps them in the host store apart from its result
   * (the trace names them), so neither history nor the model's context carries a list as long as
   * the suite.
   */
  tests?: TestCase[];
}

const REPORT = '{out}/junit.xml';

/** Tests chosen for a second run: only they run where the runner can choose (pytest, node-test), everything otherwise. */
export interface Selection {
  /** The ids to run. */
  ids: string[];
  /** Every id of the run they come from (pytest deselects the others). */
  all: string[];
}

const escapeRegExp = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** The runner's own arguments that run only `select`'s tests (none for the junit format: it reruns everything). */
function selectionArgs(format: TestsSpec['format'], select: Selection): string[] {
  if (format === 'pytest') {
    const chosen = new Set(select.ids);
    const files = new Set(select.ids.map((id) => testFile(id)).filter((f) => f !== null));
    const args: string[] = [];
    const elsewhere = new Set<string>();
    for (const id of select.all) {
      if (chosen.has(id)) continue;
      const file = testFile(id);
      if (file !== null && !files.has(file)) elsewhere.add(file);
      else args.push(`--deselect=${id}`);
    }
    // A whole file by its prefix (a node id starts with its file and `::`).
    return [...[...elsewhere].sort().map((f) => `--deselect=${f}::`), ...args];
  }
  if (format === 'node-test') {
    // Node matches a pattern against each test's own name: the names on the way to each chosen test.
    const names = new Set(select.ids.flatMap((id) => id.replace(/ #\d+$/, '').split(' > ')));
    return [`--test-name-pattern=^(?:${[...names].map(escapeRegExp).join('|')})$`];
  }
  return [];
}

/** The fixture's command with the reporter flags that make the outcomes structured (and, for a second run, the selection). */
export function testArgv(tests: TestsSpec, select?: Selection): string[] {
  const [exe, ...rest] = tests.command;
  const chosen = select ? selectionArgs(tests.format, select) : [];
  // xunit1 names each test's file: the node id comes back whole (sandbox/junit.ts).
  if (tests.format === 'pytest') return [exe, ...rest, `--junitxml=${REPORT}`, '-o', 'junit_family=xunit1', ...chosen];
  // junit: any runner; the fixture's command says where its report goes.
  if (tests.format === 'junit') return tests.command.map((a) => a.replaceAll(JUNIT_PLACEHOLDER, REPORT));
  // node-test: runner flags must come before the test paths, right after `node`.
  return [
    exe,
    '--test-reporter=junit',
    `--test-reporter-destination=${REPORT}`,
    '--test-reporter=spec',
    '--test-reporter-destination=stdout',
    ...chosen,
    ...rest,
  ];
}

/** A test run that could not start for `detail` (a task's test patch that does not apply): no usable outcome. */
export function unusableRun(detail: string): TestRunData {
  return {
    status: 'error',
    exit_code: null,
    discovered: 0,
    passed: 0,
    failed: 0,
    outcomes: noOutcomes(),
    failures: [],
    output_tail: '',
    tests: [],
    detail,
  };
}

export interface TestRunOptions {
  backend: ExecBackend;
  fixture: { tests: TestsSpec };
  limits: Limits;
  timeoutMs: number;
  signal: AbortSignal;
  onProgress?: () => void;
}

/** The run's candidate tests in its workspace; what they change there is undone (and named in the result). */
export async function runCandidateTests(opts: TestRunOptions & { paths: RunPaths }): Promise<TestRunData> {
  const { result: data, undone } = await withUndo(
    opts.paths,
    (entries) => runTestsIn(opts, opts.paths.workspace, opts.paths.control, entries),
    opts.onProgress,
  );
  return undone === null ? data : { ...data, unreceipted: undone };
}

/**
 * The candidate tests in the tree `dir` (a run's workspace, or a copy the verifier made), their
 * report written to a fresh folder under `control/out`. Nothing is undone here. `entriesBefore`
 * (what `dir` holds, the base of the bound on new files) is counted when not given.
 */
export async function runTestsIn(
  opts: TestRunOptions & { select?: Selection },
  dir: string,
  control: string,
  entriesBefore?: number,
): Promise<TestRunData> {
  const outDir = onDisk('workspace', "the test run's report folder in the control folder", () => {
    const outRoot = join(control, 'out');
    mkdirSync(outRoot, { recursive: true });
    return mkdtempSync(join(outRoot, 'tests-'));
  });
  try {
    return await testsIn(opts, dir, outDir, entriesBefore);
  } finally {
    // The process's HOME and TMPDIR: as many files as it may leave, removed in a workspace thread.
    await offThread('remove', [outDir], { key: dir });
  }
}

async function testsIn(
  opts: TestRunOptions & { select?: Selection },
  workspaceDir: string,
  outDir: string,
  entriesBefore: number | undefined,
): Promise<TestRunData> {
  const spec = {
    argv: testArgv(opts.fixture.tests, opts.select),
    workspaceDir,
    workspaceReadOnly: false,
    outDir,
    timeoutMs: Math.min(opts.timeoutMs, opts.fixture.tests.timeout_s * 1000),
    outputCapBytes: opts.limits.execOutputBytes,
    signal: opts.signal,
    onProgress: opts.onProgress,
  };
  const before = await offThread('state', [workspaceDir], { key: workspaceDir });
  const result = await execWithinDisk(opts.backend, spec, {
    limitBytes: opts.limits.workspaceBytes,
    bytesBefore: before.bytes,
    newFiles: opts.limits.newFiles,
    entriesBefore: entriesBefore ?? before.entries,
  });
  // Host paths stay out of results (and so out of the trace, history and the model's view).
  const scrub = (text: string) => text.split(outDir).join('<out>').split(workspaceDir).join('<workspace>');
  const base = {
    exit_code: result.exitCode,
    output_tail: scrub(tailBytes(result.stdout + (result.stderr ? `\n${result.stderr}` : ''), opts.limits.outputTailBytes)),
  };
  const zero = { discovered: 0, passed: 0, failed: 0, outcomes: noOutcomes(), failures: [], tests: [] };
  if (result.overLimit) return { status: 'error', ...base, ...zero, detail: overLimitDetail(result.overLimit) };
  if (result.cancelled) return { status: 'cancelled', ...base, ...zero };
  if (result.timedOut) return { status: 'timeout', ...base, ...zero };

  let read;
  try {
    read = readHostile(join(outDir, 'junit.xml'), opts.limits.reportBytes, 'the test report <out>/junit.xml');
  } catch (err) {
    // A regular report the host cannot read (EACCES, EIO) is the host's failure, not "no report".
    const code = (err as NodeJS.ErrnoException).code;
    throw nonRetryable('InfrastructureError', `cannot read the test report <out>/junit.xml: ${code ?? (err as Error).message}`, [
      code ?? 'unknown',
    ]);
  }
  if (!read.ok) {
    if (read.kind === 'missing') return { status: 'error', ...base, ...zero, detail: 'the test command wrote no test report' };
    if (read.kind === 'too_large') return { status: 'error', ...base, ...zero, detail: `test report is over the size cap: ${read.detail}` };
    // A link, a FIFO, a socket, a device or a folder where the report goes: the process's doing, never read.
    return { status: 'error', ...base, ...zero, detail: `${read.detail}; it was not read` };
  }
  const xml = read.bytes.toString('utf8');
  let counts;
  try {
    counts = parseJunit(xml, opts.fixture.tests.format);
  } catch (err) {
    return { status: 'error', ...base, ...zero, detail: `unreadable test report: ${(err as Error).message}` };
  }
  const failures = counts.failures.map((f) => ({ test: f.test, message: scrub(f.message) }));
  const data = {
    ...base,
    discovered: counts.discovered,
    passed: counts.passed,
    failed: counts.failed,
    outcomes: counts.outcomes,
    failures,
    tests: counts.tests,
  };
  if (counts.discovered === 0) return { status: 'no_tests', ...data };
  if (counts.failed > 0) return { status: 'failed', ...data };
  // Every test passed according to the report: the exit code must agree, or the output is unusable.
  if (result.exitCode !== 0)
    return { status: 'error', ...data, detail: `tests reported passing but the command exited ${result.exitCode}` };
  return { status: 'passed', ...data };
}
