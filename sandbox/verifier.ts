/**
 * The host verifier: the only thing that can make a run `completed`. Three checks, all recorded:
 * protected paths unchanged against the baseline, the candidate tests passing with at least one
 * test discovered, and the hidden acceptance cases compared with expected.json, which never
 * leaves the host.
 */
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { jsonEqual } from '../core/canonical';
import { expectedFileSchema, type RunSpec, type UnreceiptedChange, type VerifierFindings } from '../core/contracts';
import { isWritable, mayCreate } from '../core/policy';
import { formatIssues } from '../core/validate';
import type { ExecBackend } from './backends/types';
import type { Limits } from '../core/limits';
import { withUndo } from '../host/workspace/undo';
import { offThread } from '../host/workspace/thread';
import { faultPoint } from '../host/faults';
import { treeChanges } from '../host/workspace/verified-change';
import { runCandidateTests } from './test-runner';
import { execWithinDisk, overLimitDetail } from './disk-bound';
import { onDisk } from '../host/disk';
import type { RunPaths } from '../host/workspace/workspace';
import { changedFiles, changedPaths } from '../host/workspace/manifest';

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

export type AcceptanceResult = { total: number; passed: number; failed: string[]; error: string | null };

/** Strict protocol check of the acceptance command's output against expected.json. */
export function judgeAcceptance(stdout: string, expectedJson: string): AcceptanceResult {
  const expected = expectedFile.parse(JSON.parse(expectedJson));
  const ids = Object.keys(expected.cases).sort();
  const protocolError = (error: string): AcceptanceResult => ({ total: ids.length, passed: 0, failed: ids, error });
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
  return { total: ids.length, passed: ids.length - failed.length, failed, error: null };
}

export async function verify(opts: {
  backend: ExecBackend;
  fixture: RunSpec;
  /** The acceptance runner files and expected.json (host folder), or null when the run has none. */
  acceptanceDir: string | null;
  /** A repository run's base commit: the verified change is kept for `branch` and `patch`. */
  baseCommit: string | null;
  paths: RunPaths;
  limits: Limits;
  timeoutMs: number;
  signal: AbortSignal;
  onProgress: () => void;
  /** False for a task's child run: the hidden cases judge the orchestrating run, not a part of it. */
  hiddenAcceptance?: boolean;
}): Promise<VerifierFindings> {
  const { fixture, paths } = opts;
  faultPoint('in_verifier');
  const call = { key: paths.workspace, onProgress: opts.onProgress };
  const base = await offThread('baselineManifest', [paths], call);
  const current = await offThread('manifest', [paths.workspace], call);
  const protectedChanged = protectedChanges(fixture, changedPaths(base, current), new Set(base.map((e) => e.path)));
  if (opts.baseCommit !== null) {
    // The change as the verifier sees it now, before its own test run can add to the workspace.
    const { changes, unrepresentable } = treeChanges(base, current);
    // A FIFO or socket cannot go into a tree: the change could not come back whole.
    for (const path of unrepresentable) if (!protectedChanged.includes(path)) protectedChanged.push(path);
    protectedChanged.sort();
    await offThread('keepChange', [paths, opts.baseCommit, changes], call);
  }

  // Each process's changes are undone before the next step: the acceptance cases judge the verified state.
  const tests = await runCandidateTests({ ...opts, paths });
  const unreceipted: UnreceiptedChange[] = [];
  if (tests.unreceipted) unreceipted.push({ step: 'verifier_tests', ...tests.unreceipted });

  let acceptance: AcceptanceResult | null = null; // a repository run without acceptance
  if (opts.hiddenAcceptance === false) acceptance = { total: 0, passed: 0, failed: [], error: null };
  else if (fixture.acceptance !== null && opts.acceptanceDir !== null) {
    const { result, undone } = await withUndo(
      paths,
      () => runAcceptance({ ...opts, acceptance: fixture.acceptance!, acceptanceDir: opts.acceptanceDir! }),
      opts.onProgress,
    );
    acceptance = result;
    if (undone) unreceipted.push({ step: 'acceptance', ...undone });
  }
  const testsOk = tests.status === 'passed' && tests.discovered > 0;
  const acceptanceOk = acceptance === null || (acceptance.error === null && acceptance.failed.length === 0);
  return {
    passed: protectedChanged.length === 0 && testsOk && acceptanceOk,
    protected_changed: protectedChanged,
    candidate_tests: {
      status: tests.status,
      discovered: tests.discovered,
      passed: tests.passed,
      failed: tests.failed,
      error: testsOk ? null : (tests.detail ?? `candidate tests ${tests.status}`),
    },
    acceptance,
    diff_paths: changedFiles(base, current),
    ...(unreceipted.length > 0 ? { unreceipted } : {}),
  };
}

/** The hidden acceptance cases, run read-only against the workspace and judged against expected.json on the host. */
async function runAcceptance(
  opts: Parameters<typeof verify>[0] & { acceptance: NonNullable<RunSpec['acceptance']>; acceptanceDir: string },
): Promise<AcceptanceResult> {
  const { paths } = opts;
  // The acceptance runner files, minus expected.json, in a fresh host folder mounted read-only.
  const scratch = onDisk('workspace', "the acceptance run's folder in the control folder", () => {
    mkdirSync(join(paths.control, 'out'), { recursive: true });
    const made = mkdtempSync(join(paths.control, 'out', 'acceptance-'));
    cpSync(opts.acceptanceDir, join(made, 'acceptance'), { recursive: true, filter: (src) => !src.endsWith('/expected.json') });
    mkdirSync(join(made, 'out'));
    return made;
  });
  let acceptance: AcceptanceResult;
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
    const failAll = (error: string): AcceptanceResult => ({ total: ids.length, passed: 0, failed: ids, error });
    if (result.overLimit) acceptance = failAll(overLimitDetail(result.overLimit));
    else if (result.cancelled) acceptance = failAll('acceptance run was cancelled');
    else if (result.timedOut) acceptance = failAll('acceptance command timed out');
    else if (result.stdoutTruncated) acceptance = failAll('acceptance output was truncated');
    else if (result.exitCode !== 0) acceptance = failAll(`acceptance command exited ${result.exitCode}`);
    else acceptance = judgeAcceptance(result.stdout, expectedJson);
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
  return acceptance;
}
