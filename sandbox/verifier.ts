/**
 * The host verifier: the only thing that can make a run `completed`. Its checks, all recorded:
 * protected paths unchanged against the baseline; the candidate tests judged by name against
 * their outcomes at the untouched base (or the task's own FAIL_TO_PASS / PASS_TO_PASS ids), with
 * at least one test discovered (core/verdict.ts); the hidden acceptance cases compared with
 * expected.json, which never leaves the host; nothing changed by the verifier's own processes
 * (`verification_tampered`); and the test runner configured as at the base (`test_config_changed`).
 *
 * The tests run in a fresh copy of the workspace with the base's test configuration
 * (workspace/verification-tree.ts), never in the workspace itself, so what they change is read off
 * the copy. A repository run's verifier returns the change it saw (the base commit and each
 * changed path with its digest); it writes no repository state: its activity keeps the change. A test that must pass and does not is run once more, alone where its runner can
 * choose: passing then, it is `flaky`, counted as passing and named.
 */
import { cpSync, lstatSync, mkdirSync, mkdtempSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { jsonEqual } from '../core/canonical';
import { expectedFileSchema, NAMED_MAX, type RunSpec, type UnreceiptedChange, type VerifierFindings } from '../core/contracts';
import { isWritable, mayCreate } from '../core/policy';
import { formatIssues } from '../core/validate';
import type { ExecBackend } from './backends/types';
import type { Limits } from '../core/limits';
import { withUndo } from '../workspace/undo';
import { offThread } from '../workspace/thread';
import { UNDONE_PATHS_SHOWN } from '../workspace/byproducts';
import { faultPoint } from '../host/faults';
import { changeEntries, type VerifiedChange } from '../workspace/verified-change';
import { readHostile } from '../workspace/hostile-read';
import { leftCopies } from '../workspace/verification-tree';
import { decideVerdict, toRunAgain } from '../core/verdict';
import { runTestsIn, unusableRun, type Selection, type TestRunData } from './test-runner';
import { baseOutcomes, type BaselineCache } from './baseline';
import { CONFIG_FILE_MAX, testConfigChanges, type ConfigChange } from './test-config';
import { execWithinDisk, overLimitDetail } from './disk-bound';
import { onDisk } from '../host/disk';
import type { RunPaths } from '../workspace/workspace';
import { changedFiles, changedPaths } from '../workspace/manifest';

const acceptanceOutput = z.strictObject({
  schema_version: z.literal(1),
  cases: z.array(z.strictObject({ id: z.string().min(1), actual: z.json(), error: z.string().nullable() })),
});

export const expectedFile = expectedFileSchema;

/** Changed paths the run may not change: neither writable nor new files that match new_files (nor, in a repository run, protected). */
export function protectedChanges(spec: RunSpec, changed: string[], baselinePaths: Set<string>): string[] {
  return changed.filter((path) => {
    if (isWritable(spec, path)) return false;
    const isNew = !baselinePaths.has(path);
    if (isNew && mayCreate(spec, path)) return false;
    return true;
  });
}

export type AcceptanceResult = { total: number; passed: number; failed: string[]; error: string | null; tests_ref?: string };

/** Strict protocol check of the acceptance command's output against expected.json. */
export function judgeAcceptance(stdout: string, expectedJson: string): AcceptanceResult & { ids: string[] } {
  const expected = expectedFile.parse(JSON.parse(expectedJson));
  const ids = Object.keys(expected.cases).sort();
  const protocolError = (error: string) => ({ total: ids.length, passed: 0, failed: ids, error, ids });
  let parsed: unknown;
  try {
    parsed = JSON.parse(stdout);
  } catch {
    return protocolError('acceptance output is not exactly one JSON object');
  }
  const out = acceptanceOutput.safeParse(parsed);
  if (!out.success) return protocolError(`acceptance output has the wrong shape: ${formatIssues(out.error)}`);
  const seen = new Set<string>();
  for (const c of out.data.cases) {
    if (seen.has(c.id)) return protocolError(`acceptance case ${c.id} is reported twice`);
    seen.add(c.id);
  }
  const missing = ids.filter((id) => !seen.has(id));
  const extra = [...seen].filter((id) => !(id in expected.cases)).sort();
  if (missing.length || extra.length)
    return protocolError(`acceptance cases missing: [${missing.join(', ')}], unexpected: [${extra.join(', ')}]`);
  const failed = out.data.cases
    .filter((c) => c.error !== null || !jsonEqual(c.actual, expected.cases[c.id]))
    .map((c) => c.id)
    .sort();
  return { total: ids.length, passed: ids.length - failed.length, failed, error: null, ids };
}

/** What a task names of its own verdict, resolved from the host store (activities/verification.ts). */
export interface TaskVerdictInput {
  fail_to_pass?: string[];
  pass_to_pass?: string[];
  tests_may_change: boolean;
  test_patch: string | null;
}

/** What the verifier returns: its findings (for the run's history) and, in a repository run, the change it judged (for the host to keep). */
export interface Verification {
  findings: VerifierFindings;
  change: VerifiedChange | null;
}

export async function verify(opts: {
  backend: ExecBackend;
  fixture: RunSpec;
  /** The acceptance runner files and expected.json (host folder), or null when the run has none. */
  acceptanceDir: string | null;
  /** A repository run's base commit: the verified change on it is returned, for `branch` and `patch`. */
  baseCommit: string | null;
  paths: RunPaths;
  limits: Limits;
  timeoutMs: number;
  signal: AbortSignal;
  onProgress: () => void;
  /** False for a task's child run: the hidden cases judge the orchestrating run, not a part of it. */
  hiddenAcceptance?: boolean;
  /** The host store's side: the base's outcomes kept per tree and command, and every test list. */
  cache: BaselineCache;
  /** The docker image the tests run in, when it is not the worker's own (part of the base's key). */
  image: string | null;
  task: TaskVerdictInput;
  /** The user let the run change its test configuration (`--allow-test-config-change`). */
  allowTestConfig: boolean;
}): Promise<Verification> {
  const { fixture, paths } = opts;
  faultPoint('in_verifier');
  const call = { key: paths.workspace, onProgress: opts.onProgress };
  const unreceipted: UnreceiptedChange[] = [];
  // A test run of the loop whose worker died left its changes: they are put back first.
  const earlier = await offThread('settleLeftovers', [paths], call);
  if (earlier) unreceipted.push({ step: 'run_tests', ...earlier });
  await offThread('remove', [leftCopies(paths)], call);
  // Only the entries that differ cross to this thread: a 100,000-file workspace is compared there.
  const { before: base, after: current } = await offThread('changedSinceBaseline', [paths], call);
  const protectedChanged = protectedChanges(fixture, changedPaths(base, current), new Set(base.map((e) => e.path)));
  let change: VerifiedChange | null = null;
  if (opts.baseCommit !== null) {
    // The change as the verifier sees it now: its own tests run in copies, never in the workspace.
    const { changes, unrepresentable } = changeEntries(base, current);
    // A FIFO or socket cannot go into a tree: the change could not come back whole.
    for (const path of unrepresentable) if (!protectedChanged.includes(path)) protectedChanged.push(path);
    protectedChanged.sort();
    change = { base_commit: opts.baseCommit, changes };
  }

  // The test configuration is the base's, unless the user let the run change it.
  const read = (root: string) => (path: string) => {
    const got = readHostile(join(root, path), CONFIG_FILE_MAX, path);
    return got.ok ? got.bytes : null;
  };
  const config = testConfigChanges(fixture.tests, base, current, read(paths.baseline), read(paths.workspace));
  const tampered = new Tampered();
  const tests = await testsInCopy(opts, config, null, tampered);

  const baseTests = await baseOutcomes({ ...opts, testPatch: opts.task.test_patch });
  const end = { status: tests.status, tests: tests.tests ?? [] };
  const judged = { base: baseTests, end, task: opts.task };
  const again = toRunAgain(judged);
  const rerun = again.length > 0 ? await testsInCopy(opts, config, { ids: again, all: end.tests.map((t) => t.id) }, tampered) : null;
  const { ok: testsOk, verdict } = decideVerdict({
    ...judged,
    rerun: rerun && { status: rerun.status, tests: rerun.tests ?? [] },
    // The workspace is as the scan above saw it: the verifier's tests ran in copies.
    fileExists: (p) => lstatSync(join(paths.workspace, p), { throwIfNoEntry: false }) !== undefined,
  });
  if (tampered.size > 0) {
    const changed = [...tampered].sort();
    unreceipted.push({
      step: 'verifier_tests',
      paths: changed.slice(0, UNDONE_PATHS_SHOWN),
      count: Math.max(changed.length, tampered.counted),
    });
  }

  let acceptance: AcceptanceResult | null = null; // a repository run without acceptance
  if (opts.hiddenAcceptance === false) acceptance = { total: 0, passed: 0, failed: [], error: null };
  else if (fixture.acceptance !== null && opts.acceptanceDir !== null) {
    const { result, undone } = await withUndo(
      paths,
      () => runAcceptance({ ...opts, acceptance: fixture.acceptance!, acceptanceDir: opts.acceptanceDir! }),
      opts.onProgress,
    );
    // Each case with its outcome, kept like a test run's: `trace --full` and report.html show them.
    const cases = result.ids.map(
      (id) => ({ id, outcome: !result.failed.includes(id) ? 'passed' : result.error ? 'error' : 'failed' }) as const,
    );
    const { ids: _ids, ...counts } = result;
    acceptance = { ...counts, tests_ref: opts.cache.keepTests(cases) };
    if (undone) {
      unreceipted.push({ step: 'acceptance', ...undone });
      for (const p of undone.paths) tampered.add(p);
    }
  }
  const acceptanceOk = acceptance === null || (acceptance.error === null && acceptance.failed.length === 0);
  const configOk = config.length === 0 || opts.allowTestConfig;
  const testsError = testsOk
    ? null
    : (tests.detail ?? (tests.status === 'passed' || tests.status === 'failed' ? verdict.decision : `candidate tests ${tests.status}`));
  const findings: VerifierFindings = {
    passed: protectedChanged.length === 0 && testsOk && acceptanceOk && tampered.size === 0 && configOk,
    protected_changed: protectedChanged,
    candidate_tests: {
      status: tests.status,
      discovered: tests.discovered,
      passed: tests.passed,
      failed: tests.failed,
      error: testsError,
      outcomes: tests.outcomes,
      tests_ref: tests.tests ? opts.cache.keepTests(tests.tests) : null,
    },
    acceptance,
    diff_paths: changedFiles(base, current),
    ...(unreceipted.length > 0 ? { unreceipted } : {}),
    verdict,
    ...(tampered.size > 0 ? { verification_tampered: [...tampered].sort().slice(0, NAMED_MAX) } : {}),
    ...(config.length > 0
      ? { test_config_changed: config.map((c) => c.path).slice(0, NAMED_MAX), test_config_allowed: opts.allowTestConfig }
      : {}),
  };
  return { findings, change };
}

/** Paths a copy's tests changed, at most this many of each copy kept by name. */
const TAMPERED_KEPT = 1000;

/** The paths the verifier's processes changed: named (up to TAMPERED_KEPT a copy), and the most one copy counted. */
class Tampered extends Set<string> {
  counted = 0;
}

/**
 * The candidate tests in a fresh copy of the workspace with the base's test configuration (unless
 * allowed otherwise) and the task's test patch; every path they change in the copy is added to
 * `tampered`. `select`: only these tests, for their second run.
 */
async function testsInCopy(
  opts: Parameters<typeof verify>[0],
  config: ConfigChange[],
  select: Selection | null,
  tampered: Tampered,
): Promise<TestRunData> {
  const call = { key: opts.paths.workspace, onProgress: opts.onProgress };
  const copy = await offThread('copyForTests', [opts.paths, opts.paths.workspace, select ? 'again' : 'end'], call);
  try {
    const restored = opts.allowTestConfig ? [] : config;
    const patchError = await offThread('prepareCopy', [copy.tree, opts.paths.baseline, restored, opts.task.test_patch], call);
    if (patchError !== null) return unusableRun(patchError);
    const kept = join(copy.dir, 'before.json');
    const entries = await offThread('keepManifest', [copy.tree, kept], call);
    const data = await runTestsIn({ ...opts, ...(select ? { select } : {}) }, copy.tree, copy.control, entries);
    const changed = await offThread('changedSinceKept', [copy.tree, kept, TAMPERED_KEPT], call);
    for (const p of changed.paths) tampered.add(p);
    tampered.counted = Math.max(tampered.counted, changed.count);
    return data;
  } finally {
    await offThread('remove', [copy.dir], call);
  }
}

/** The hidden acceptance cases, run read-only against the workspace and judged against expected.json on the host. */
async function runAcceptance(
  opts: Parameters<typeof verify>[0] & { acceptance: NonNullable<RunSpec['acceptance']>; acceptanceDir: string },
): Promise<AcceptanceResult & { ids: string[] }> {
  const { paths } = opts;
  // The acceptance runner files, minus expected.json, in a fresh host folder mounted read-only.
  const scratch = onDisk('workspace', "the acceptance run's folder in the control folder", () => {
    mkdirSync(join(paths.control, 'out'), { recursive: true });
    const made = mkdtempSync(join(paths.control, 'out', 'acceptance-'));
    cpSync(opts.acceptanceDir, join(made, 'acceptance'), { recursive: true, filter: (src) => !src.endsWith('/expected.json') });
    mkdirSync(join(made, 'out'));
    return made;
  });
  let acceptance: AcceptanceResult & { ids: string[] };
  try {
    const runnerDir = join(scratch, 'acceptance');
    const outDir = join(scratch, 'out');
    const expectedJson = readFileSync(join(opts.acceptanceDir, 'expected.json'), 'utf8');
    const spec = {
      argv: opts.acceptance.command,
      workspaceDir: paths.workspace,
      workspaceReadOnly: true,
      outDir,
      acceptanceDir: runnerDir,
      timeoutMs: Math.min(opts.timeoutMs, opts.acceptance.timeout_s * 1000),
      outputCapBytes: opts.limits.execOutputBytes,
      signal: opts.signal,
      onProgress: opts.onProgress,
    };
    const result = await execWithinDisk(opts.backend, spec, {
      limitBytes: opts.limits.workspaceBytes,
      bytesBefore: 0,
      newFiles: opts.limits.newFiles,
      entriesBefore: 0,
    });
    const ids = Object.keys(expectedFile.parse(JSON.parse(expectedJson)).cases).sort();
    const failAll = (error: string) => ({ total: ids.length, passed: 0, failed: ids, error, ids });
    if (result.overLimit) acceptance = failAll(overLimitDetail(result.overLimit));
    else if (result.cancelled) acceptance = failAll('acceptance run was cancelled');
    else if (result.timedOut) acceptance = failAll('acceptance command timed out');
    else if (result.stdoutTruncated) acceptance = failAll('acceptance output was truncated');
    else if (result.exitCode !== 0) acceptance = failAll(`acceptance command exited ${result.exitCode}`);
    else acceptance = judgeAcceptance(result.stdout, expectedJson);
  } finally {
    // The acceptance process's HOME and TMPDIR are in it: removed in a workspace thread.
    await offThread('remove', [scratch], { key: paths.workspace });
  }
  return acceptance;
}
