/**
 * Runs a fixture's candidate tests through a backend and reads the counts from the JUnit
 * report (pytest's --junitxml, Node's junit reporter, or for the junit format whatever runner
 * the fixture names, writing to {junit}). Used by the run_tests tool and by the verifier alike.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { JUNIT_PLACEHOLDER, type TestsSpec } from '../core/contracts';
import type { ExecBackend } from './backends/types';
import type { Limits } from './config';
import { nonRetryable } from './failures';
import { parseJunit } from './junit';

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

function tail(text: string, bytes: number): string {
  const buf = Buffer.from(text);
  return buf.length <= bytes
    ? text
    : buf
        .subarray(buf.length - bytes)
        .toString('utf8')
        .replace(/^\uFFFD+/, '');
}

export async function runCandidateTests(opts: {
  backend: ExecBackend;
  fixture: { tests: TestsSpec };
  workspaceDir: string;
  outRoot: string;
  limits: Limits;
  timeoutMs: number;
  signal: AbortSignal;
  onProgress?: () => void;
}): Promise<TestRunData> {
  mkdirSync(opts.outRoot, { recursive: true });
  const outDir = mkdtempSync(join(opts.outRoot, 'tests-'));
  try {
    const result = await opts.backend.exec({
      argv: testArgv(opts.fixture.tests),
      workspaceDir: opts.workspaceDir,
      workspaceReadOnly: false,
      outDir,
      timeoutMs: Math.min(opts.timeoutMs, opts.fixture.tests.timeout_s * 1000),
      outputCapBytes: opts.limits.execOutputBytes,
      signal: opts.signal,
      onProgress: opts.onProgress,
    });
    // Host paths stay out of results (and so out of the trace, history and the model's view).
    const scrub = (text: string) => text.split(outDir).join('<out>').split(opts.workspaceDir).join('<workspace>');
    const base = {
      exit_code: result.exitCode,
      output_tail: scrub(tail(result.stdout + (result.stderr ? `\n${result.stderr}` : ''), opts.limits.outputTailBytes)),
    };
    const zero = { discovered: 0, passed: 0, failed: 0, failures: [] };
    if (result.cancelled) return { status: 'cancelled', ...base, ...zero };
    if (result.timedOut) return { status: 'timeout', ...base, ...zero };

    const reportPath = join(outDir, 'junit.xml');
    let xml: string;
    try {
      if (statSync(reportPath).size > opts.limits.reportBytes)
        return { status: 'error', ...base, ...zero, detail: 'test report is over the size cap' };
      xml = readFileSync(reportPath, 'utf8');
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return { status: 'error', ...base, ...zero, detail: 'the test command wrote no test report' };
      // A report there but unreadable (EACCES, EIO, a folder in its place: EISDIR) is the host's failure, not "no report".
      throw nonRetryable('InfrastructureError', `cannot read the test report <out>/junit.xml: ${code ?? (err as Error).message}`, [
        code ?? 'unknown',
      ]);
    }
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
  } finally {
    rmSync(outDir, { recursive: true, force: true });
  }
}
