/**
 * The live context (core/context.ts): rebuilt from authoritative facts within a budget, whole
 * call/result groups, the latest failure kept, long results cut to their structure, and an
 * explicit compaction note. Also the delays a provider asks for.
 */
import { buildContext, estimateTokens, runFacts, type ContextGroup } from '../core/context';
import { errorResult, okResult } from '../core/contracts';
import { retryAfterMs } from '../models/errors';
import { linkcheckFixture } from './helpers/run-dir';

const facts = runFacts(linkcheckFixture(), {
  status: 'running',
  turn: 31,
  counters: { turns: 31, tool_calls: 30, writes: 1 },
  budgets: { max_turns: 40, max_tool_calls: 60, deadline_s: 900, call_timeout_s: 120 },
  plan: 'reproduce, then fix the resolution of relative links',
  pending_action: { action_id: 'a'.repeat(64), path: 'src/linkcheck.py', before: 'b'.repeat(64), after: 'c'.repeat(64) },
  verification: null,
  notice: null,
});

const read = (i: number, size: number): ContextGroup => ({
  kind: 'reply',
  text: null,
  calls: [
    {
      id: `read-${i}`,
      name: 'read_file',
      arguments: { path: 'src/linkcheck.py' },
      result: okResult(`read-${i}`, { text: `${i}:`.padEnd(size, 'x'), version: 'd'.repeat(64) }),
    },
  ],
});

describe('the live context', () => {
  const failure: ContextGroup = {
    kind: 'reply',
    text: 'run the tests',
    calls: [
      {
        id: 'red',
        name: 'run_tests',
        arguments: { preset: 'candidate_tests' },
        result: errorResult('red', 'tests_failed', { status: 'failed', failed: 1, failures: [{ test: 't', message: 'boom' }] }),
      },
    ],
  };
  const groups = [read(0, 400), failure, ...Array.from({ length: 30 }, (_, i) => read(i + 1, 2000))];

  it('keeps whole groups within the budget, the latest failure first, and says what it left out', () => {
    const built = buildContext(facts, groups, 4000);
    expect(built.estimated_tokens).toBeLessThanOrEqual(4000);
    expect(built.groups.length).toBeLessThan(groups.length);
    expect(built.groups).toContainEqual(failure);
    // Each kept reply still has every call with its own result.
    for (const g of built.groups) if (g.kind === 'reply') for (const c of g.calls) expect(c.result.call_id).toBe(c.id);
    // Newest first after the failure: the last group is the newest read.
    expect(built.groups.at(-1)).toEqual(groups.at(-1));
    expect(built.compaction).toMatchObject({ omitted_groups: groups.length - built.groups.length, shortened_results: 0 });
    expect(built.summary).toContain('history_compaction:');
  });

  it('states the authoritative facts in the summary: goal, rules, status, counters, plan, pending action', () => {
    const { summary } = buildContext(facts, [], 4000);
    for (const part of [
      facts.task,
      'src/linkcheck.py',
      'tests/test_agent_*.py',
      'status: running',
      'turn 31 of at most 40',
      'tool calls used: 30 of 60',
      'writes done: 1',
      facts.plan!,
      `action ${'a'.repeat(64)}`,
    ]) {
      expect(summary).toContain(part);
    }
    expect(summary).not.toContain('history_compaction');
  });

  it('keeps the task and its rules apart from what changes every turn, so a provider can cache them', () => {
    const now = buildContext(facts, groups, 4000);
    const later = buildContext(
      { ...facts, turn: 32, counters: { turns: 32, tool_calls: 31, writes: 2 }, plan: 'another plan', notice: 'a note' },
      groups,
      4000,
    );
    expect(later.stable).toBe(now.stable);
    expect(now.stable).toContain(facts.task);
    expect(now.stable).not.toMatch(/turn|plan|history_compaction/);
    expect(later.state).not.toBe(now.state);
    expect(now.state).toMatch(/^## Run state/);
    expect(now.state).toContain('history_compaction:');
    expect(now.summary).toBe(`${now.stable}\n\n${now.state}`);
  });

  it('cuts an oversized result to its envelope, small fields and head and tail', () => {
    const built = buildContext(facts, [read(1, 200_000)], 4000);
    const result = (built.groups[0] as Extract<ContextGroup, { kind: 'reply' }>).calls[0].result as {
      ok: boolean;
      truncated: boolean;
      data: { text: string; version: string };
    };
    expect(result).toMatchObject({ ok: true, truncated: true, data: { version: 'd'.repeat(64) } });
    expect(result.data.text).toMatch(/^1:x+\n… \[\d+ characters left out; the full result is kept by the harness\] …\nx+$/);
    expect(estimateTokens(result)).toBeLessThan(1000);
    expect(built.compaction).toMatchObject({ omitted_groups: 0, shortened_results: 1 });
  });
});

describe('retry delays asked for by a provider', () => {
  const headers = (h: Record<string, string>) => ({ get: (name: string) => h[name] ?? null });
  it('prefers retry-after-ms, reads retry-after as seconds or an HTTP date, and caps at 60 s', () => {
    expect(retryAfterMs(headers({ 'retry-after-ms': '250', 'retry-after': '9' }))).toBe(250);
    expect(retryAfterMs(headers({ 'retry-after': '2' }))).toBe(2000);
    expect(retryAfterMs(headers({ 'retry-after': new Date(10_000 + 5_000).toUTCString() }), 10_000)).toBe(5000);
    expect(retryAfterMs(headers({ 'retry-after': '3600' }))).toBe(60_000);
    expect(retryAfterMs(headers({}))).toBeNull();
  });
});
