import { join } from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { Limits } from '../core/limits';
import { manifest, manifestDigest, runPaths } from '../workspace/workspace';
import type { ToolResult } from '../core/contracts';
import { PROJECT_ROOT } from './helpers/run-dir';
import { runOnce, startServer } from './helpers/temporal';

const CORPUS = join(PROJECT_ROOT, 'fixtures', 'path-corpus');

let env: TestWorkflowEnvironment;
beforeAll(async () => {
  env = await startServer();
});
afterAll(async () => {
  await env?.teardown();
});

async function runReplay(replay: string, limits?: Partial<Limits>) {
  const input = {
    fixture: CORPUS,
    source: { kind: 'replay', path: join(CORPUS, 'replays', `${replay}.json`), trusted: true },
    approver: 'policy:approve-writable',
  };
  const run = await runOnce(env, input, { limits });
  const paths = runPaths(run.stateDir, run.runId);
  return { ...run, unchanged: manifestDigest(manifest(paths.workspace)) === manifestDigest(manifest(paths.baseline)) };
}

describe('bad input fails for its own reason, before any side effect', () => {
  it('gives each call of the bad-input replay exactly the code its call_id names', async () => {
    const { outcome, trace, ledgerEntries, unchanged } = await runReplay('bad-inputs');
    const observed = trace.filter((e) => e.type === 'tool_observed').map((e) => e.data as ToolResult);
    expect(observed).toHaveLength(28);
    for (const result of observed) {
      expect({ call: result.call_id, ok: result.ok, error: result.error }).toEqual({
        call: result.call_id,
        ok: false,
        error: result.call_id.split('.')[0],
      });
    }
    // Every rejection is in the trace right after its proposal.
    for (const e of trace.filter((x) => x.type === 'tool_proposed'))
      expect(trace[e.seq]).toMatchObject({ type: 'tool_observed', call_id: e.call_id });
    expect(unchanged).toBe(true);
    expect(ledgerEntries).toBe(0);
    expect(trace.some((e) => e.type === 'approval_requested')).toBe(false);
    // A final with no work is verified, and never completed.
    expect(trace.some((e) => e.type === 'verification_started')).toBe(true);
    expect(outcome.record).toMatchObject({ status: 'failed', reason: 'verification_failed', writes: 0, receipts: 0, diff_paths: [] });
    expect(outcome.record.tool_errors).toEqual({
      invalid_fields: 7,
      no_match: 1,
      no_op: 1,
      non_unique_match: 1,
      not_found: 2,
      path_denied: 11,
      stale_version: 1,
      unknown_tool: 1,
      write_denied: 3,
    });
    // No absolute host path reaches the trace, even for calls that tried one.
    expect(JSON.stringify(trace)).not.toContain(PROJECT_ROOT);
  });

  it('caps oversized outputs at 256 bytes with whole entries and truncated: true', async () => {
    const { trace } = await runReplay('oversized', { readBytes: 256, searchBytes: 256 });
    const results = Object.fromEntries(trace.filter((e) => e.type === 'tool_observed').map((e) => [e.call_id, e.data as ToolResult]));
    const read = results['read-big'].data as { text: string; end: number; total_lines: number };
    expect(results['read-big'].truncated).toBe(true);
    expect(Buffer.byteLength(read.text)).toBeLessThanOrEqual(256);
    expect(read.text.endsWith('\n')).toBe(true); // whole lines only
    expect(read.end).toBeLessThan(read.total_lines);
    const search = results['search-many'].data as { matches: unknown[] };
    expect(results['search-many'].truncated).toBe(true);
    expect(Buffer.byteLength(JSON.stringify(search.matches))).toBeLessThanOrEqual(256);
    expect(results['diff-empty']).toMatchObject({ ok: true, truncated: false, data: { diff: '', paths: [] } });
  });
});
