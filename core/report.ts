/**
 * The batch evaluation report (SPEC section 7). Deterministic: the same runs give the same bytes.
 */
import { canonicalJson } from './canonical';
import type { RunRecord } from './contracts';

export interface EvalReport {
  schema_version: 1;
  runs: RunRecord[];
  summary: { runs: number; completed: number; failed: number };
}

const byFixtureAndReplay = (a: RunRecord, b: RunRecord): number => {
  const ka = `${a.fixture}\u0000${a.replay ?? ''}`;
  const kb = `${b.fixture}\u0000${b.replay ?? ''}`;
  return ka < kb ? -1 : ka > kb ? 1 : 0;
};

export function buildReport(records: RunRecord[]): EvalReport {
  const runs = [...records].sort(byFixtureAndReplay);
  const completed = runs.filter((r) => r.status === 'completed').length;
  return { schema_version: 1, runs, summary: { runs: runs.length, completed, failed: runs.length - completed } };
}

/** report.json's bytes: the report with its fields in SPEC order, two-space indented. */
export function reportJson(report: EvalReport): string {
  // Round-trip through canonical JSON first so no undefined or key-order accident leaks in.
  const ordered = {
    schema_version: report.schema_version,
    runs: report.runs.map((r) => ({
      fixture: r.fixture,
      replay: r.replay,
      status: r.status,
      reason: r.reason,
      writes: r.writes,
      receipts: r.receipts,
      red_observed: r.red_observed,
      diff_paths: r.diff_paths,
      candidate_tests: r.candidate_tests,
      acceptance: r.acceptance,
      tool_errors: JSON.parse(canonicalJson(r.tool_errors)) as Record<string, number>,
    })),
    summary: report.summary,
  };
  return `${JSON.stringify(ordered, null, 2)}\n`;
}

/** The human-readable report. */
export function reportMarkdown(report: EvalReport): string {
  const lines = [
    '# Evaluation report',
    '',
    `${report.summary.runs} runs: ${report.summary.completed} completed, ${report.summary.failed} not completed.`,
    '',
    '| fixture | replay | status | reason | writes | receipts | red first | tests (passed/discovered) | acceptance (passed/total) | failed cases | tool errors |',
    '|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const r of report.runs) {
    const tests = r.candidate_tests ? `${r.candidate_tests.passed}/${r.candidate_tests.discovered}` : '-';
    const acceptance = r.acceptance ? `${r.acceptance.passed}/${r.acceptance.total}` : '-';
    const failed = r.acceptance?.failed.join(', ') || '';
    const errors = Object.entries(r.tool_errors).map(([k, v]) => `${k} ${v}`).join(', ');
    lines.push(`| ${r.fixture} | ${r.replay ?? ''} | ${r.status} | ${r.reason ?? ''} | ${r.writes} | ${r.receipts} | ${r.red_observed ? 'yes' : 'no'} | ${tests} | ${acceptance} | ${failed} | ${errors} |`);
  }
  return `${lines.join('\n')}\n`;
}
