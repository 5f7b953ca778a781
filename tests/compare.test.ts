/**
 * Replay evaluation of a change: two real batches of 5 epochs over two fixtures, where version B's
 * link-check replay makes two extra identical reads. `eval compare` keeps the flips and McNemar,
 * prints per fixture and overall the distributions of pass rate, turns, tool error rate, repeated
 * calls, empty replies and cost with their intervals, and marks the planted difference in that
 * fixture and no other; `--html` writes the same view as a page that opens from disk in headless
 * Chromium with no request beyond it. On synthetic reports: noise that A and B share is not
 * marked, a lost pass is judged like McNemar, an older report's missing figures are said so.
 */
import { execFile } from 'node:child_process';
import { cpSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { collectReport, writeOutputs } from '../client/eval';
import { evalResult, startEval } from '../client/run-access';
import type { EvalPlan } from '../core/batch-plan';
import { compareReports, type BehaviourKey, type Comparison, type EvalReport, type EvalRun } from '../client/report/report';
import { readSettings } from '../host/settings';
import { createWorker } from '../worker';
import { launchChromium, testOutput } from './helpers/browser';
import { LINKCHECK, PROJECT_ROOT, tempDir } from './helpers/run-dir';
import { startServer, uniqueQueue } from './helpers/temporal';

const exec = promisify(execFile);
const CLI = join(PROJECT_ROOT, 'dist', 'client', 'cli.js');
const WORDCOUNT = join(PROJECT_ROOT, 'fixtures', 'wordcount-node');

/** A copy of a fixture whose only replay is `canonical`, with `edit` applied to its decisions. */
function fixtureCopy(dir: string, edit: (decisions: { kind: string; call?: { call_id: string } }[]) => unknown[] = (d) => d): string {
  const name = dir.split('/').at(-1)!;
  const copy = join(tempDir('compare-fixture'), name);
  cpSync(dir, copy, { recursive: true, filter: (src) => !src.includes(`${join(dir, 'replays')}/`) });
  const decisions = JSON.parse(readFileSync(join(dir, 'replays', 'canonical.json'), 'utf8')).decisions;
  writeFileSync(join(copy, 'replays', 'canonical.json'), JSON.stringify({ schema_version: 1, decisions: edit(decisions) }));
  return copy;
}

/** The flagged behaviours of a comparison, as `group: key`. */
const flagged = (c: Comparison) =>
  [c.behaviours.overall, ...c.behaviours.per_fixture].flatMap((g) =>
    g.behaviours.filter((b) => b.outside).map((b) => `${g.fixture ?? 'overall'}: ${b.key}`),
  );

describe('eval compare on two real batches', () => {
  let env: TestWorkflowEnvironment;
  beforeAll(async () => {
    env = await startServer();
  });
  afterAll(async () => {
    await env?.teardown();
  });

  it('marks the planted difference (two extra identical reads in one fixture) and nothing in the other fixture', async () => {
    const linkA = fixtureCopy(LINKCHECK);
    // Version B reads the source twice more, before any write: two repeated identical calls.
    const linkB = fixtureCopy(LINKCHECK, (decisions) => {
      const at = decisions.findIndex((d) => d.call?.call_id === 'read-source');
      const again = (n: number) => ({ ...decisions[at], call: { ...decisions[at].call, call_id: `read-again-${n}` } });
      return [...decisions.slice(0, at + 1), again(1), again(2), ...decisions.slice(at + 1)];
    });
    const words = fixtureCopy(WORDCOUNT);
    const plan = (dirs: string[]): EvalPlan => ({
      fixtures: dirs.map((dir) => ({ dir, replays: [{ path: join(dir, 'replays', 'canonical.json'), name: 'canonical', trusted: true }] })),
      epochs: 5,
      backend: 'local',
      approver: 'policy:approve-writable',
    });
    const taskQueue = uniqueQueue('compare');
    const stateDir = tempDir('compare-state');
    const { worker, close } = await createWorker({ connection: env.nativeConnection, taskQueue, stateDir, docker: false });
    const outs: string[] = [];
    try {
      await worker.runUntil(async () => {
        for (const [name, dirs] of [
          ['a', [linkA, words]],
          ['b', [linkB, words]],
        ] as const) {
          const batch = `compare-${name}-${process.pid}`;
          const p = plan([...dirs]);
          await evalResult(await startEval(env.client, { plan: p, concurrency: 2 }, { taskQueue, workflowId: batch }));
          const out = tempDir(`compare-out-${name}`);
          writeOutputs(out, await collectReport(env.client, { ...readSettings(), stateDir }, batch, p, null), { batch });
          outs.push(out);
        }
      });
    } finally {
      close();
    }
    const [a, b] = outs.map((o) => JSON.parse(readFileSync(join(o, 'report.json'), 'utf8')) as EvalReport);
    expect(a.runs.map((r) => [r.fixture, r.status, r.turns, r.tool_calls, r.repeated_calls])).toEqual([
      ...Array(5).fill(['linkcheck-nested', 'completed', 8, 6, 0]),
      ...Array(5).fill(['wordcount-node', 'completed', a.runs[5].turns, a.runs[5].tool_calls, 0]),
    ]);
    expect(b.runs.filter((r) => r.fixture === 'linkcheck-nested').map((r) => [r.status, r.turns, r.tool_calls, r.repeated_calls])).toEqual(
      Array(5).fill(['completed', 10, 8, 2]),
    );

    const html = join(tempDir('compare-html'), 'comparison.html');
    const { stdout } = await exec(process.execPath, [
      CLI,
      'eval',
      'compare',
      join(outs[0], 'report.json'),
      join(outs[1], 'report.json'),
      '--html',
      html,
    ]);
    // The flips and McNemar as before: nothing flipped.
    expect(stdout).toContain('10 paired runs, 0 flipped');
    expect(stdout).toContain('McNemar exact p = 1 (completed only in A: 0, only in B: 0)');
    // Per fixture and overall, every behaviour with A, B and B - A and their intervals.
    const section = (name: string) => {
      const lines = stdout.split('\n');
      const start = lines.findIndex((l) => l.startsWith(`${name} (`));
      return lines.slice(start + 1, start + 7);
    };
    for (const name of ['overall', 'linkcheck-nested', 'wordcount-node']) {
      expect(section(name).map((l) => l.slice(2, 18).trim())).toEqual([
        'pass rate',
        'turns',
        'tool error rate',
        'repeated calls',
        'empty replies',
        'cost (USD)',
      ]);
    }
    const link = section('linkcheck-nested');
    expect(link[3]).toBe(
      '* repeated calls   A 0.00 [0.00, 0.00] (0.00..0.00)   B 2.00 [2.00, 2.00] (2.00..2.00)   B-A +2.00 [+2.00, +2.00]',
    );
    expect(link[1]).toMatch(/^\* turns {12}A 8\.00 \[8\.00, 8\.00\] .* B-A \+2\.00 \[\+2\.00, \+2\.00\]$/);
    // Two more calls, the same one error: the rate falls from 1/6 to 1/8.
    expect(link[2]).toMatch(/^\* tool error rate .*B-A -0\.042 \[-0\.042, -0\.042\]$/);
    expect(link[0]).toMatch(/^ {2}pass rate/);
    expect(link[5]).toBe('  cost (USD)       - (A and B: runs without a priced usage)');
    // Nothing is marked in the other fixture.
    expect(section('wordcount-node').filter((l) => l.startsWith('*'))).toEqual([]);
    expect(stdout).toMatch(
      /\ndifferences outside their interval: overall turns \+1\.000; overall tool error rate -0\.\d{3}; overall repeated calls \+1\.000; linkcheck-nested turns \+2\.000; linkcheck-nested tool error rate -0\.042; linkcheck-nested repeated calls \+2\.000\n/,
    );

    // The same in JSON, deterministic: the same reports give the same intervals.
    const json = JSON.parse(
      (await exec(process.execPath, [CLI, 'eval', 'compare', join(outs[0], 'report.json'), join(outs[1], 'report.json'), '--json'])).stdout,
    ) as Comparison;
    expect(flagged(json)).toEqual([
      'overall: turns',
      'overall: tool_error_rate',
      'overall: repeated_calls',
      'linkcheck-nested: turns',
      'linkcheck-nested: tool_error_rate',
      'linkcheck-nested: repeated_calls',
    ]);
    expect(json).toEqual(compareReports(a, b));

    // The page: the same view, from disk, nothing fetched.
    const browser = await launchChromium();
    try {
      const { page, outside } = await browser.newPage();
      const requests: string[] = [];
      page.on('request', (r) => requests.push(r.url()));
      await page.goto(pathToFileURL(html).href);
      const marked = await page
        .locator('section.group tr.outside')
        .evaluateAll((rows) =>
          rows.map((r) => `${r.closest('section')!.getAttribute('data-fixture')}: ${r.getAttribute('data-behaviour')}`),
        );
      expect(marked).toEqual(flagged(json));
      expect(await page.locator('section.group[data-fixture="wordcount-node"] tr.behaviour').count()).toBe(6);
      expect(await page.textContent('section.group[data-fixture="linkcheck-nested"] tr[data-behaviour="repeated_calls"] td.diff')).toBe(
        '+2.00 [+2.00, +2.00]',
      );
      expect(await page.textContent('#flip-summary')).toContain('10 paired runs, 0 flipped');
      const shot = testOutput('comparison-html.png');
      await page.screenshot({ path: shot, fullPage: true });
      expect(statSync(shot).size).toBeGreaterThan(1000);
      expect(requests.filter((u) => !u.startsWith('file:'))).toEqual([]);
      expect(outside.aborted).toEqual([]);
    } finally {
      await browser.close();
    }
  });
});

describe('compareReports on synthetic reports', () => {
  const run = (fixture: string, epoch: number, o: Partial<EvalRun> = {}): EvalRun => ({
    fixture,
    replay: 'live',
    epoch,
    status: 'completed',
    reason: null,
    writes: 1,
    receipts: 1,
    red_observed: true,
    diff_paths: [],
    candidate_tests: null,
    acceptance: null,
    tool_errors: {},
    turns: 8,
    tool_calls: 6,
    repeated_calls: 0,
    empty_replies: 0,
    unreceipted_changes: 0,
    trace_id: null,
    ...o,
  });
  const report = (runs: EvalRun[]): EvalReport => ({
    schema_version: 1,
    runs,
    summary: { runs: runs.length, completed: runs.filter((r) => r.status === 'completed').length, failed: 0 },
  });
  const epochs = [1, 2, 3, 4, 5, 6, 7, 8];
  const get = (c: Comparison, fixture: string | null, key: BehaviourKey) =>
    (fixture === null ? c.behaviours.overall : c.behaviours.per_fixture.find((g) => g.fixture === fixture)!).behaviours.find(
      (b) => b.key === key,
    )!;

  it('marks no difference where A and B vary alike (a live model), and one that stands clear of the noise', () => {
    const noisy = (e: number, shift: number) => ({
      turns: 6 + ((e * 7 + shift) % 5),
      repeated_calls: (e + shift) % 3,
      empty_replies: (e * 3 + shift) % 2,
      usage: { model_calls: 6, input_tokens: 1, output_tokens: 1, cached_tokens: 0, cost_usd: 0.01 * (1 + ((e + shift) % 4)) },
    });
    const a = report([...epochs.map((e) => run('same', e, noisy(e, 0))), ...epochs.map((e) => run('worse', e, noisy(e, 0)))]);
    const b = report([
      ...epochs.map((e) => run('same', e, noisy(e, 1))),
      ...epochs.map((e) => run('worse', e, { ...noisy(e, 1), turns: 20 + (e % 3) })),
    ]);
    const c = compareReports(a, b);
    expect(flagged(c).filter((f) => f.startsWith('same'))).toEqual([]);
    expect(flagged(c)).toContain('worse: turns');
    const cost = get(c, 'same', 'cost_usd');
    expect(cost.a!.value).toBeCloseTo(0.025, 10);
    expect(cost.a!.low).toBeLessThan(cost.a!.value);
    expect(cost.a!.high).toBeGreaterThan(cost.a!.value);
    expect(cost.diff!.low).toBeLessThan(0);
    expect(cost.diff!.high).toBeGreaterThan(0);
    // Deterministic: the same reports give the same intervals.
    expect(compareReports(a, b)).toEqual(c);
  });

  it('judges one lost pass of five as noise (as McNemar does) and five of five as a difference', () => {
    const a = report([1, 2, 3, 4, 5].map((e) => run('f', e)));
    const oneLost = report([1, 2, 3, 4, 5].map((e) => run('f', e, e === 3 ? { status: 'failed', reason: 'verification_failed' } : {})));
    const allLost = report([1, 2, 3, 4, 5].map((e) => run('f', e, { status: 'failed', reason: 'verification_failed' })));
    const one = compareReports(a, oneLost);
    expect(one.flips).toHaveLength(1);
    expect(get(one, 'f', 'pass_rate')).toMatchObject({
      a: { value: 1 },
      b: { value: 0.8 },
      diff: { value: -0.2, high: 0 },
      outside: false,
    });
    expect(get(compareReports(a, allLost), 'f', 'pass_rate')).toMatchObject({ diff: { value: -1, low: -1, high: -1 }, outside: true });
  });

  it('says which figures an older report lacks, and marks nothing on a single run', () => {
    const old = report(
      [1, 2].map(
        (e) =>
          ({
            ...run('f', e),
            turns: undefined,
            tool_calls: undefined,
            repeated_calls: undefined,
            empty_replies: undefined,
          }) as unknown as EvalRun,
      ),
    );
    const now = report([1, 2].map((e) => run('f', e)));
    const c = compareReports(old, now);
    expect(get(c, 'f', 'turns')).toMatchObject({
      a: null,
      b: null,
      diff: null,
      outside: false,
      missing: 'A: no such figure in its runs (an older report)',
    });
    expect(get(c, 'f', 'pass_rate').missing).toBeNull();
    const single = compareReports(report([run('f', 1)]), report([run('f', 1, { turns: 30 })]));
    expect(get(single, 'f', 'turns')).toMatchObject({ diff: { value: 22 }, outside: false });
  });
});
