import { readFileSync } from 'node:fs';
import { join, sep } from 'node:path';
import { sharedWorkflowModules, WORKFLOW_BUNDLES, type BundleKind } from '../worker';
import { PROJECT_ROOT } from '../host/settings';
import { PAGE_BYTES, PAGE_EVENTS, Trace, WINDOW_EVENTS } from '../core/trace';
import { canonicalJson, jsonEqual } from '../core/canonical';
import { z } from 'zod';
import { addUsage, approvalSignalSchema, runInputSchema } from '../core/contracts';
import {
  activityFailureReason,
  ACTIVITY_FAILURE_REASONS,
  FAILURE_TYPES,
  NON_RETRYABLE_FAILURE_TYPES,
  RETRIES_EXHAUSTED_REASON,
} from '../core/failures';
import { budgetStop, callTimeoutMs, capBudgets, effectiveBudgets, taskAllotment } from '../core/budgets';
import { globMatches, normalizeRepoPath } from '../core/paths';
import { evaluatePolicy } from '../core/policy';
import { toolDefinitions, type ToolTexts } from '../core/tools';
import { validateCall } from '../core/validate';
import { decideVerdict, testFile, toRunAgain } from '../core/verdict';
import { applyUnifiedDiff, PatchError } from '../core/unified-diff';
import type { TestCase } from '../core/contracts';

const scope = { writable: ['src/linkcheck.py'], new_files: ['tests/test_agent_*.py'] };

describe('path rules', () => {
  it.each([
    ['../etc/passwd', 'path contains ..'],
    ['src/../../x', 'path contains ..'],
    ['/etc/passwd', 'absolute paths are not allowed'],
    ['C:/Windows', 'absolute paths are not allowed'],
    ['a\\b', 'use / as the separator; backslash is not allowed'],
    ['src/a\0b', 'path contains NUL'],
    ['CON', 'reserved device name "CON"'],
    ['docs/aux.txt', 'reserved device name "aux.txt"'],
    ['lpt1', 'reserved device name "lpt1"'],
    ['x'.repeat(300), 'a path segment is longer than 255 bytes'],
    [`${'abc/'.repeat(300)}x`, 'path is longer than 1024 bytes'],
    ['', 'path is empty'],
  ])('denies %j', (path, reason) => {
    expect(normalizeRepoPath(path)).toEqual({ ok: false, reason });
  });

  it('normalises ./ and doubled slashes', () => {
    expect(normalizeRepoPath('./src//linkcheck.py')).toEqual({ ok: true, path: 'src/linkcheck.py' });
    expect(normalizeRepoPath('.', true)).toEqual({ ok: true, path: '' });
  });

  it('matches * within one segment only', () => {
    expect(globMatches('tests/test_agent_*.py', 'tests/test_agent_nested.py')).toBe(true);
    expect(globMatches('tests/test_agent_*.py', 'tests/sub/test_agent_x.py')).toBe(false);
    expect(globMatches('tests/test_agent_*.py', 'tests/test_agent_x.pyc')).toBe(false);
    expect(globMatches('a.b', 'axb')).toBe(false);
  });
});

describe('policy', () => {
  const patch = { name: 'apply_patch' as const };

  it('allows reads, asks for writable and new files, denies the rest', () => {
    expect(evaluatePolicy({ name: 'read_file' }, null, scope).decision).toBe('allow');
    expect(evaluatePolicy(patch, 'src/linkcheck.py', scope).decision).toBe('ask');
    expect(evaluatePolicy(patch, 'tests/test_agent_x.py', scope).decision).toBe('ask');
    const denied = evaluatePolicy(patch, 'notes.txt', scope);
    expect(denied.decision).toBe('deny');
    expect(denied.matched.map((r) => r.id)).toEqual(['protected-path']);
  });
});

describe('validateCall', () => {
  it('accepts a well-formed call and normalises its path', () => {
    const v = validateCall({ call_id: 'read-1', name: 'read_file', arguments: { path: './src/linkcheck.py', start: 1 } }, 'x');
    expect(v).toEqual({ ok: true, call: { call_id: 'read-1', name: 'read_file', arguments: { path: 'src/linkcheck.py', start: 1 } } });
  });

  it.each([
    ['an unknown tool', { call_id: 'a', name: 'delete_file', arguments: {} }, 'unknown_tool'],
    ['an extra top-level field', { call_id: 'a', name: 'read_file', arguments: { path: 'x' }, extra: 1 }, 'invalid_fields'],
    ['an extra argument', { call_id: 'a', name: 'read_file', arguments: { path: 'x', mode: 'r' } }, 'invalid_fields'],
    ['a missing argument', { call_id: 'a', name: 'read_file', arguments: {} }, 'invalid_fields'],
    ['a mistyped argument', { call_id: 'a', name: 'read_file', arguments: { path: 7 } }, 'invalid_fields'],
    ['an out-of-range argument', { call_id: 'a', name: 'search', arguments: { query: 'x', max_results: 201 } }, 'invalid_fields'],
    ['end before start', { call_id: 'a', name: 'read_file', arguments: { path: 'x', start: 5, end: 2 } }, 'invalid_fields'],
    ['a non-integer line', { call_id: 'a', name: 'read_file', arguments: { path: 'x', start: 1.5 } }, 'invalid_fields'],
    ['a bad version', { call_id: 'a', name: 'apply_patch', arguments: { path: 'x', version: 'v1', old: 'a', new: 'b' } }, 'invalid_fields'],
    ['an unknown preset', { call_id: 'a', name: 'run_tests', arguments: { preset: 'all' } }, 'invalid_fields'],
    ['a bad call_id', { call_id: 'has space', name: 'show_diff', arguments: {} }, 'invalid_fields'],
    ['a path with ..', { call_id: 'a', name: 'read_file', arguments: { path: '../x' } }, 'path_denied'],
  ])('rejects %s', (_what, raw, code) => {
    const v = validateCall(raw, 'fallback-1');
    expect(v.ok).toBe(false);
    if (!v.ok) {
      expect(v.result.error).toBe(code);
      expect(v.result.ok).toBe(false);
    }
  });

  it('names the result with a fallback id when the call_id is unusable', () => {
    const v = validateCall({ call_id: 'bad id!', name: 'show_diff', arguments: {} }, 'call-3');
    expect(!v.ok && v.result.call_id).toBe('call-3');
  });
});

describe('canonical JSON and budgets', () => {
  it('sorts keys at every depth and compares values, not key order', () => {
    expect(canonicalJson({ b: 1, a: [{ d: 2, c: 1 }] })).toBe('{"a":[{"c":1,"d":2}],"b":1}');
    expect(jsonEqual({ a: 1, b: 2 }, { b: 2, a: 1 })).toBe(true);
    expect(jsonEqual([1, 2], [2, 1])).toBe(false);
  });

  it('checks limits before a decision and caps call time by the time left', () => {
    const b = effectiveBudgets({ max_turns: 20, max_tool_calls: 40, deadline_s: 900, call_timeout_s: 120 }, { max_turns: 2 });
    expect(b.max_turns).toBe(2);
    expect(budgetStop(b, { turns: 2, tool_calls: 0 }, 1000)).toBe('max_turns');
    expect(budgetStop(b, { turns: 0, tool_calls: 40 }, 1000)).toBe('max_tool_calls');
    expect(budgetStop(b, { turns: 0, tool_calls: 0 }, 0)).toBe('deadline');
    expect(budgetStop(b, { turns: 1, tool_calls: 1 }, 1000)).toBeNull();
    expect(callTimeoutMs(b, 30_000)).toBe(30_000);
    expect(callTimeoutMs(b, 300_000)).toBe(120_000);
    const priced = { ...b, max_cost_usd: 0.5 };
    expect(budgetStop(priced, { turns: 0, tool_calls: 0, cost_usd: 0.5 }, 1000)).toBe('max_cost_usd');
    expect(budgetStop(priced, { turns: 0, tool_calls: 0, cost_usd: 0.49 }, 1000)).toBeNull();
    expect(budgetStop(priced, { turns: 0, tool_calls: 0, cost_usd: null }, 1000)).toBeNull();
  });

  it("caps budgets at the operator's maximums, naming each field, and fills a limit the run left open", () => {
    const asked = { max_turns: 5000, max_tool_calls: 40, deadline_s: 900, call_timeout_s: 120, max_output_tokens: 8000 };
    const { budgets, capped } = capBudgets(asked, { max_turns: 2000, max_tool_calls: 100, max_cost_usd: 3, max_output_tokens: 6000 });
    expect(budgets).toEqual({
      max_turns: 2000,
      max_tool_calls: 40,
      deadline_s: 900,
      call_timeout_s: 120,
      max_output_tokens: 6000,
      max_cost_usd: 3,
    });
    expect(capped).toEqual([
      { field: 'max_turns', asked: 5000, max: 2000 },
      { field: 'max_cost_usd', asked: null, max: 3 },
      { field: 'max_output_tokens', asked: 8000, max: 6000 },
    ]);
    // A limit the harness gives by default (4096 output tokens) is lowered only when the maximum is below it.
    expect(capBudgets({ ...asked, max_output_tokens: undefined }, { max_output_tokens: 6000 }).capped).toEqual([]);
    expect(capBudgets({ ...asked, max_output_tokens: undefined }, { max_output_tokens: 1000 }).budgets.max_output_tokens).toBe(1000);
  });

  it('gives a task an equal share of what the tree has left, among the free slots and the orchestrating run, and refuses one it cannot fund', () => {
    const b = { max_turns: 40, max_tool_calls: 100, deadline_s: 900, call_timeout_s: 120, max_cost_usd: 1 };
    expect(taskAllotment(b, { turns: 4, tool_calls: 10, cost_usd: 0.1 }, 2)).toEqual({
      ok: true,
      allotment: { max_turns: 12, max_tool_calls: 30, max_cost_usd: 0.3 },
    });
    const { max_cost_usd: _unpriced, ...unpriced } = b;
    expect(taskAllotment(unpriced, { turns: 0, tool_calls: 0, cost_usd: 0 }, 1)).toEqual({
      ok: true,
      allotment: { max_turns: 20, max_tool_calls: 50 },
    });
    expect(taskAllotment(b, { turns: 39, tool_calls: 0, cost_usd: 0 }, 1)).toMatchObject({
      ok: false,
      detail: expect.stringMatching(/1 of its 40 turns/),
    });
    expect(taskAllotment(b, { turns: 0, tool_calls: 0, cost_usd: 1 }, 1)).toMatchObject({
      ok: false,
      detail: expect.stringMatching(/cost budget/),
    });
  });

  it('generates a JSON schema per tool from the validating schemas', () => {
    const v1 = JSON.parse(readFileSync(join(PROJECT_ROOT, 'prompts', 'v1', 'tools.json'), 'utf8')) as { tools: ToolTexts };
    const defs = toolDefinitions(v1.tools);
    // The model-facing texts come from the prompt version, the shape from the validating schema.
    expect(defs.find((d) => d.name === 'read_file')!.description).toBe(v1.tools.read_file.description);
    expect(defs.map((d) => d.name)).toEqual(['read_file', 'search', 'apply_patch', 'run_tests', 'show_diff']);
    const patch = defs.find((d) => d.name === 'apply_patch')!.parameters as { required: string[]; additionalProperties: boolean };
    expect(patch.required).toEqual(['path', 'version', 'old', 'new']);
    expect(patch.additionalProperties).toBe(false);
  });
});

describe('schemas shared by the workflows of a worker thread', () => {
  /** What the SDK does to a preloaded module's exports before any workflow runs (deepFreeze in @temporalio/worker's reusable-vm.js). */
  function deepFreeze(value: unknown, seen = new WeakSet<object>()): void {
    if (value === null || (typeof value !== 'object' && typeof value !== 'function') || seen.has(value)) return;
    seen.add(value);
    if (Object.isFrozen(value)) return;
    if (typeof value === 'object') {
      for (const key of [...Object.getOwnPropertyNames(value), ...Object.getOwnPropertySymbols(value)]) {
        try {
          deepFreeze((value as Record<string | symbol, unknown>)[key], seen);
        } catch {
          // as the SDK: some objects cannot be frozen
        }
      }
    }
    Object.freeze(value);
  }

  /** The patterns of zod checks reachable from a schema (its definition, nested schemas and checks). */
  function patterns(value: unknown, seen = new Set<unknown>(), path = '$'): string[] {
    if (value === null || typeof value !== 'object' || seen.has(value)) return [];
    seen.add(value);
    if (value instanceof RegExp) return [`${path}: ${value}`];
    const zod = (value as { _zod?: { def?: unknown } })._zod;
    if (zod?.def !== undefined) return patterns(zod.def, seen, path);
    return Object.entries(value).flatMap(([k, v]) => (typeof v === 'function' ? [] : patterns(v, seen, `${path}.${k}`)));
  }

  it('reach no regex check from what workflows parse (any pattern goes through a refinement)', () => {
    expect(patterns(runInputSchema)).toEqual([]);
    expect(patterns(approvalSignalSchema)).toEqual([]);
    // The walk does find one when there is one.
    expect(patterns(z.object({ a: z.string().regex(/x/) }))).toEqual(['$.shape.a.checks.0.pattern: /x/']);
  });

  it('are every core/ module that each workflow bundle reaches, preloaded before any workflow', () => {
    const ids = (code: string) => new Set([...code.matchAll(/"\.\/dist\/(core\/[^"]+\.js)"/g)].map((m) => m[1]));
    for (const [kind, file] of Object.entries(WORKFLOW_BUNDLES)) {
      const code = readFileSync(file, 'utf8');
      const start = code.indexOf('exports.preloadModules = function preloadModules() {');
      const preload = code.slice(start, code.indexOf('\n}', start));
      expect({ kind, preloaded: [...ids(preload)].sort() }).toEqual({ kind, preloaded: [...ids(code)].sort() });
      expect(ids(preload).size).toBeGreaterThan(10);
      expect(sharedWorkflowModules(kind as BundleKind).filter((m) => m.includes(`${sep}core${sep}`))).toHaveLength(ids(preload).size);
    }
  });

  it('still parse the run input and approval Signals once deep-frozen, with the same messages', () => {
    jest.isolateModules(() => {
      // Fresh copies of every shared core/ module, frozen as they are inside a workflow thread.
      deepFreeze(require('zod'));
      for (const file of sharedWorkflowModules('traced').filter((m) => m.includes(`${sep}core${sep}`))) deepFreeze(require(file));
      const contracts = require('../core/contracts') as typeof import('../core/contracts');
      const validate = require('../core/validate') as typeof import('../core/validate');
      const input = {
        fixture: 'f',
        source: { kind: 'replay', path: 'p.json', trusted: true },
        approver: 'policy:approve-writable',
        budgets: { max_turns: 3 },
      };
      expect(contracts.runInputSchema.parse(input)).toMatchObject({ approver: 'policy:approve-writable', backend: 'local' });
      expect(
        contracts.runInputSchema.parse({ ...input, source: { kind: 'provider', endpoint: 'team-openai', model: 'm' } }).source,
      ).toMatchObject({ endpoint: 'team-openai' });
      const bad = contracts.runInputSchema.safeParse({
        ...input,
        approver: 'policy:BAD',
        source: { kind: 'provider', endpoint: 'BAD', model: 'm', base_url: 'http://x' },
      });
      expect(bad.success || validate.formatIssues(bad.error)).toBe(
        'source.endpoint: endpoint name: lowercase letters, digits, . _ - (at most 64); source: Unrecognized key: "base_url"; approver: Invalid string: must match pattern /^policy:[a-z0-9-]+$/',
      );
      const repo = { path: 'repo', base_commit: 'c'.repeat(40), task: 'fix it', id: 'my-repo' };
      expect(
        contracts.runInputSchema.parse({ repo, source: { kind: 'provider', endpoint: 'team-openai', model: 'm' }, prompt: 'v1' }),
      ).toMatchObject({ repo, prompt: 'v1' });
      const badRepo = contracts.runInputSchema.safeParse({
        repo: { ...repo, base_commit: 'main', id: 'My Repo' },
        source: input.source,
        prompt: 'latest',
      });
      expect(badRepo.success || validate.formatIssues(badRepo.error)).toBe(
        'repo.base_commit: a full commit id (40 or 64 hex digits); repo.id: id: lowercase letters, digits, . _ - (at most 64); prompt: a prompt version is v<N>, e.g. v1',
      );
      const digest = 'a'.repeat(64);
      expect(
        contracts.approvalSignalSchema.parse({
          action_id: digest,
          decision: 'approve',
          args_digest: digest,
          workspace_digest: digest,
          message_id: 'console:alice/1',
        }).decision,
      ).toBe('approve');
      const forged = contracts.approvalSignalSchema.safeParse({
        action_id: digest,
        decision: 'approve',
        args_digest: 'x',
        workspace_digest: digest,
        message_id: 'no spaces',
      });
      expect(forged.success || validate.formatIssues(forged.error)).toBe(
        'args_digest: a lowercase hex SHA-256 digest; message_id: message_id: 1-128 characters of [A-Za-z0-9_.:/-]',
      );
    });
  });
});

describe('failures as data', () => {
  it('maps every failure type to a reason (all but DiskFull never retried), and any other type to activity_failed', () => {
    expect([...NON_RETRYABLE_FAILURE_TYPES].sort()).toEqual([
      'DataError',
      'ForkUnavailable',
      'InfrastructureError',
      'PayloadTooLarge',
      'ProtocolError',
      'ProviderUnavailable',
      'ReplayFileError',
    ]);
    for (const type of NON_RETRYABLE_FAILURE_TYPES) {
      expect(FAILURE_TYPES[type].type).toBe(type);
      expect(activityFailureReason(type)).toBe(ACTIVITY_FAILURE_REASONS[type]);
    }
    // A full disk waits for space (retried, within its attempts), then ends the run disk_full.
    expect(FAILURE_TYPES.DiskFull).toMatchObject({ type: 'DiskFull', reason: 'disk_full', waits: true });
    expect(activityFailureReason('DiskFull')).toBe('disk_full');
    expect(activityFailureReason('ProtocolError')).toBe('harness_error');
    expect(activityFailureReason('PayloadTooLarge')).toBe('harness_error');
    expect(activityFailureReason('Error')).toBe(RETRIES_EXHAUSTED_REASON);
    expect(activityFailureReason('toString')).toBe('activity_failed');
    expect(activityFailureReason(undefined)).toBe('activity_failed');
  });

  it('has a row of the failure table (docs/failures.md) for every type, with the reason it ends the run with', () => {
    const table = readFileSync(join(__dirname, '..', '..', 'docs', 'failures.md'), 'utf8');
    const rows = table.split('\n').filter((l) => l.startsWith('| '));
    for (const f of Object.values(FAILURE_TYPES)) {
      expect({ type: f.type, row: rows.some((r) => r.includes(`\`${f.type}\``) && r.includes(`\`failed\` / \`${f.reason}\``)) }).toEqual({
        type: f.type,
        row: true,
      });
    }
    expect(rows.some((r) => r.includes(`\`failed\` / \`${RETRIES_EXHAUSTED_REASON}\``))).toBe(true);
  });
});

describe('model usage', () => {
  it('sums calls into a run total, and a cost stays null once any call had no price', () => {
    const call = (input: number, cost: number | null) => ({
      model_calls: 1,
      input_tokens: input,
      output_tokens: 10,
      cached_tokens: 5,
      cost_usd: cost,
    });
    const two = addUsage(addUsage(null, call(100, 0.5)), call(200, 0.25));
    expect(two).toEqual({ model_calls: 2, input_tokens: 300, output_tokens: 20, cached_tokens: 10, cost_usd: 0.75 });
    expect(addUsage(two, call(1, null))).toMatchObject({ model_calls: 3, cost_usd: null });
    expect(addUsage(addUsage(two, call(1, null)), call(1, 1))).toMatchObject({ model_calls: 4, cost_usd: null });
  });
});

describe('the trace a run holds', () => {
  const filled = (n: number, dataBytes = 100) => {
    const trace = new Trace();
    for (let i = 0; i < n; i++) trace.add('tool_observed', { text: 'x'.repeat(dataBytes) });
    return trace;
  };

  it('answers pages under the cap, in order, resuming after the last event', () => {
    const trace = filled(300, 400);
    const seen: number[] = [];
    let after = 0;
    for (;;) {
      const page = trace.page({ after });
      expect(JSON.stringify(page).length).toBeLessThan(PAGE_BYTES + 1024);
      expect(page.events.length).toBeLessThanOrEqual(PAGE_EVENTS);
      seen.push(...page.events.map((e) => e.seq));
      if (page.next === null) break;
      after = page.next;
    }
    expect(seen).toEqual(Array.from({ length: 300 }, (_, i) => i + 1));
    expect(trace.page({ tail: 3 }).events.map((e) => e.seq)).toEqual([298, 299, 300]);
    expect(trace.page({ after: 300 })).toEqual({ events: [], next: null, oldest: 1, newest: 300 });
  });

  it('keeps every unstored event and only a window of stored ones, so memory stays bounded', () => {
    const trace = filled(1000);
    expect(trace.unstored()).toHaveLength(1000);
    trace.markStored(990);
    expect(trace.unstored().map((e) => e.seq)).toEqual([991, 992, 993, 994, 995, 996, 997, 998, 999, 1000]);
    expect(trace.page({ tail: 1 }).oldest).toBe(1000 - WINDOW_EVENTS + 1);
    trace.add('run_finished', {});
    expect(trace.carried()).toEqual({ next_seq: 1002, unstored: trace.unstored() });
    expect(
      trace
        .unstored()
        .map((e) => e.seq)
        .at(-1),
    ).toBe(1001);
  });
});

describe('the verdict by named tests', () => {
  const t = (id: string, outcome: TestCase['outcome']): TestCase => ({ id, outcome });
  const zero = { passed: 0, failed: 0, error: 0, skipped: 0, xfail: 0 };
  const base = (tests: TestCase[], status = 'failed') => ({ status, outcomes: zero, tests_ref: null, cached: false, tests });
  const BASE = [t('a.py::ok', 'passed'), t('a.py::other', 'passed'), t('a.py::bug', 'failed'), t('a.py::skip', 'skipped')];
  const decide = (o: Partial<Omit<Parameters<typeof decideVerdict>[0], 'end'>> & { end: TestCase[] }) =>
    decideVerdict({
      base: base(BASE),
      rerun: null,
      task: {},
      fileExists: () => true,
      ...o,
      end: { status: o.end.some((x) => x.outcome === 'failed') ? 'failed' : o.end.length ? 'passed' : 'no_tests', tests: o.end },
    });

  it('keeps every test that passed at the base, lets earlier failures stand, names the fixed ones and new failing tests', () => {
    const kept = decide({ end: [t('a.py::ok', 'passed'), t('a.py::other', 'passed'), t('a.py::bug', 'failed'), t('a.py::new', 'passed')] });
    expect(kept.ok).toBe(true);
    expect(kept.verdict).toMatchObject({ decided_by: 'base', tests_lost: [], tests_regressed: [], fixed_tests: [] });
    const fixed = decide({ end: [t('a.py::ok', 'passed'), t('a.py::other', 'passed'), t('a.py::bug', 'passed')] });
    expect([fixed.ok, fixed.verdict.fixed_tests]).toEqual([true, ['a.py::bug']]);
    const bad = decide({ end: [t('a.py::ok', 'skipped'), t('a.py::bug', 'passed'), t('a.py::mine', 'failed')] });
    expect(bad.ok).toBe(false);
    expect(bad.verdict).toMatchObject({ tests_lost: ['a.py::other'], tests_regressed: ['a.py::ok'], new_tests_failed: ['a.py::mine'] });
    expect(bad.verdict.decision).toBe(
      'decided by the 2 tests that passed at the base; 1 lost; 1 regressed; 1 new test failing; 1 fixed: failed',
    );
  });

  it('runs again only the expected tests that failed, and counts those that pass then as flaky', () => {
    const end = [t('a.py::ok', 'failed'), t('a.py::other', 'error'), t('a.py::bug', 'failed')];
    expect(toRunAgain({ base: base(BASE), end: { status: 'failed', tests: end }, task: {} })).toEqual(['a.py::ok', 'a.py::other']);
    const again = decide({ end, rerun: { status: 'failed', tests: [t('a.py::ok', 'passed'), t('a.py::other', 'failed')] } });
    expect(again.verdict).toMatchObject({ flaky: ['a.py::ok'], tests_regressed: ['a.py::other'] });
    const all = decide({ end, rerun: { status: 'passed', tests: [t('a.py::ok', 'passed'), t('a.py::other', 'passed')] } });
    expect([all.ok, all.verdict.flaky]).toEqual([true, ['a.py::ok', 'a.py::other']]);
    expect(all.verdict.decision).toContain('2 flaky tests (failed, then passed when run once more) counted as passing');
    // A rerun that gave no usable outcome settles nothing.
    expect(decide({ end, rerun: { status: 'timeout', tests: [] } }).verdict.flaky).toEqual([]);
  });

  it("lets a task's FAIL_TO_PASS and PASS_TO_PASS decide, naming what did not pass", () => {
    const task = { fail_to_pass: ['a.py::bug', 'a.py::gone'], pass_to_pass: ['a.py::ok'] };
    const v = decide({ task, end: [t('a.py::ok', 'passed'), t('a.py::other', 'failed'), t('a.py::bug', 'passed')] });
    expect(v.ok).toBe(false);
    expect(v.verdict).toMatchObject({
      decided_by: 'task',
      fail_to_pass: { total: 2, passed: 1, failed: ['a.py::gone'] },
      pass_to_pass: { total: 1, passed: 1, failed: [] },
      tests_lost: ['a.py::gone'],
      tests_regressed: [],
    });
    // Without PASS_TO_PASS, the tests that passed at the base are kept.
    const f2p = decide({ task: { fail_to_pass: ['a.py::bug'] }, end: [t('a.py::ok', 'passed'), t('a.py::bug', 'passed')] });
    expect([f2p.ok, f2p.verdict.tests_lost, f2p.verdict.pass_to_pass]).toEqual([
      false,
      ['a.py::other'],
      { total: 2, passed: 1, failed: ['a.py::other'] },
    ]);
  });

  it('counts a test whose file is gone as removed only when the task lets tests change, and falls back to counts without a base', () => {
    const gone = (p: string) => p !== 'a.py';
    const end = [t('b.py::x', 'passed')];
    expect(decide({ end, fileExists: gone }).verdict.tests_lost).toEqual(['a.py::ok', 'a.py::other']);
    const may = decide({ end, fileExists: gone, task: { tests_may_change: true } });
    expect([may.ok, may.verdict.tests_removed, may.verdict.tests_lost]).toEqual([true, ['a.py::ok', 'a.py::other'], []]);
    // No usable base: every test must pass, with one at least (the zero-test guard holds in every mode).
    expect(decide({ base: base([], 'timeout'), end: [t('x', 'passed')] }).verdict.decided_by).toBe('counts');
    expect(decide({ base: base([], 'timeout'), end: [t('x', 'failed')] }).ok).toBe(false);
    expect(decide({ base: base([], 'no_tests'), end: [] }).ok).toBe(false);
    expect(testFile('tests/test_x.py::T::test_y[a::b]')).toBe('tests/test_x.py');
    expect(testFile('suite > name')).toBeNull();
  });
});

describe('unified diffs applied as text', () => {
  const files: Record<string, string> = { 'src/a.py': 'one\ntwo\nthree\n', 'old.txt': 'gone\n' };
  const read = (p: string) => files[p] ?? null;
  const patch = [
    'diff --git a/src/a.py b/src/a.py',
    '--- a/src/a.py',
    '+++ b/src/a.py',
    '@@ -1,3 +1,3 @@',
    ' one',
    '-two',
    '+TWO',
    ' three',
    'diff --git a/new.py b/new.py',
    'new file mode 100644',
    '--- /dev/null',
    '+++ b/new.py',
    '@@ -0,0 +1 @@',
    '+x',
    'diff --git a/old.txt b/old.txt',
    'deleted file mode 100644',
    '--- a/old.txt',
    '+++ /dev/null',
    '@@ -1 +0,0 @@',
    '-gone',
    '',
  ].join('\n');

  it('gives each file before and after: an edit, a new file and a deletion', () => {
    expect(applyUnifiedDiff(patch, read)).toEqual([
      { path: 'src/a.py', before: 'one\ntwo\nthree\n', after: 'one\nTWO\nthree\n' },
      { path: 'new.py', before: null, after: 'x\n' },
      { path: 'old.txt', before: 'gone\n', after: null },
    ]);
  });

  it('refuses what it cannot apply exactly, naming the file', () => {
    expect(() => applyUnifiedDiff(patch, (p) => (p === 'src/a.py' ? 'one\n2\nthree\n' : read(p)))).toThrow(
      new PatchError("the patch does not apply to src/a.py: a hunk's context is not there"),
    );
    expect(() => applyUnifiedDiff(patch, (p) => (p === 'new.py' ? 'x\n' : read(p)))).toThrow(/creates new.py, which exists/);
    expect(() => applyUnifiedDiff('diff --git a/x b/y\nsimilarity index 100%\nrename from x\nrename to y\n', read)).toThrow(/renames/);
    expect(() => applyUnifiedDiff('diff --git a/b.png b/b.png\nBinary files a/b.png and b/b.png differ\n', read)).toThrow(/binary/);
    expect(() => applyUnifiedDiff(patch.replaceAll('src/a.py', '../a.py'), read)).toThrow(/path contains \.\./);
  });
});
