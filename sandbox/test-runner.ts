/**
 * Runs a fixture's candidate tests through a backend and reads the counts from the JUnit
 * report (pytest's --junitxml, Node's junit reporter, or for the junit format whatever runner
 * the fixture names, writing to {junit}). Used by the run_tests tool and by the verifier alike.
 * Whatever the tests change in the workspace is undone (host/workspace/byproducts.ts), and the
 * report is read as the sandbox left it: never through a link, never waiting on a FIFO.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { JUNIT_PLACEHOLDER, type TestsSpec } from '../core/contracts';
import { readHostile } from '../host/workspace/hostile-read';
import type { ExecBackend } from './backends/types';
import { tailBytes } from './backends/capped-output';
import type { Undone } from '../host/workspace/byproducts';
import { withUndo } from '../host/workspace/undo';
import { offThread } from '../host/workspace/thread';
import type { Limits } from '../core/limits';
import { nonRetryable } from '../core/failures';
import { parseJunit } from './junit';
import { execWithinDisk, overLimitDetail } from './disk-bound';
import { onDisk } from '../host/disk';
import type { RunPaths } from '../host/workspace/workspace';

export type TestStatus = 'passed' | 'failed' | 'no_tests' | 'timeout' | 'cancelled' | 'error';

export interface TestRunData {
  status: TestStatus;
  exit_code: number | null;
  discovered: number;
  passed: number;
  failed: number;
  failures: { test: string; message: string }[];
  output_tail: string;
  /** Why the output is unusable, for status `error`. */
  detail?: string;
  /** What the test run changed in the workspace, undone before this result (absent: nothing). */
  unreceipted?: Undone;
}

const REPORT = '{out}/junit.xml';

/** The fixture's command with the reporter flags that make the counts structured. */
export function testArgv(tests: TestsSpec): string[] {
  const [exe, ...rest] = tests.command;
  if (tests.format === 'pytest') return [exe, ...rest, `--junitxml=${REPORT}`];
  // junit: any runner; the fixture's command says where its report goes.
  if (tests.format === 'junit') return tests.command.map((a) => a.replaceAll(JUNIT_PLACEHOLDER, REPORT));
  // node-test: runner flags must come before the test paths, right after `node`.
  return [
    exe,
    '--test-reporter=junit',
    `--test-reporter-destination=${REPORT}`,
    '--test-reporter=spec',
    '--test-reporter-destination=stdout',
    ...rest,
  ];
}

export async function runCandidateTests(opts: {
  backend: ExecBackend;
  fixture: { tests: TestsSpec };
  paths: RunPaths;
  limits: Limits;
  timeoutMs: number;
  signal: AbortSignal;
  onProgress?: () => void;
}): Promise<TestRunData> {
  const outDir = onDisk('workspace', "the test run's report folder in the control folder", () => {
    const outRoot = join(opts.paths.control, 'out');
    mkdirSync(outRoot, { recursive: true });
    return mkdtempSync(join(outRoot, 'tests-'));
  });
  try {
    const { result: data, undone } = await withUndo(opts.paths, (entries) => testsIn(opts, outDir, entries), opts.onProgress);
    return undone === null ? data : { ...data, unreceipted: undone };
  } finally {
    rmSync(outDir, { recursive: true, force: true });
  }
}

async function testsIn(opts: Parameters<typeof runCandidateTests>[0], outDir: string, entriesBefore: number): Promise<TestRunData> {
  const workspaceDir = opts.paths.workspace;
  const spec = {
    argv: testArgv(opts.fixture.tests),
    workspaceDir,
    workspaceReadOnly: false,
    outDir,
    timeoutMs: Math.min(opts.timeoutMs, opts.fixture.tests.timeout_s * 1000),
    outputCapBytes: opts.limits.execOutputBytes,
    signal: opts.signal,
    onProgress: opts.onProgress,
  };
  const result = await execWithinDisk(opts.backend, spec, {
    limitBytes: opts.limits.workspaceBytes,
    bytesBefore: (await offThread('state', [workspaceDir], { key: workspaceDir })).bytes,
    newFiles: opts.limits.newFiles,
    entriesBefore,
  });
  // Host paths stay out of results (and so out of the trace, history and the model's view).
  const scrub = (text: string) => text.split(outDir).join('<out>').split(workspaceDir).join('<workspace>');
  const base = {
    exit_code: result.exitCode,
    output_tail: scrub(tailBytes(result.stdout + (result.stderr ? `\n${result.stderr}` : ''), opts.limits.outputTailBytes)),
  };
  const zero = { discovered: 0, passed: 0, failed: 0, failures: [] };
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
    counts = parseJunit(xml);
  } catch (err) {
    return { status: 'error', ...base, ...zero, detail: `unreadable test report: ${(err as Error).message}` };
  }
  const failures = counts.failures.map((f) => ({ test: f.test, message: scrub(f.message) }));
  const data = { ...base, discovered: counts.discovered, passed: counts.passed, failed: counts.failed, failures };
  if (counts.discovered === 0) return { status: 'no_tests', ...data };
  if (counts.failed > 0) return { status: 'failed', ...data };
  // Every test passed according to the report: the exit code must agree, or the output is unusable.
  if (result.exitCode !== 0)
    return { status: 'error', ...data, detail: `tests reported passing but the command exited ${result.exitCode}` };
  return { status: 'passed', ...data };
}
