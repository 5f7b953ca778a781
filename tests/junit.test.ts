/**
 * The junit test format: any runner whose command writes a JUnit XML report to `{junit}`. The
 * py-duration-junit fixture runs its unittest suite under a vendored third-party runner
 * (unittest-xml-reporting, inside the fixture's repository) on both backends with exact counts;
 * the zero-test guard, timeouts and a missing report behave as for the built-in formats, and a
 * folder in the report's place is an unusable report (tests/untrusted-repository/byproducts.test.ts has the
 * FIFO and the link).
 */
import { cpSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { fixtureSchema, type Fixture } from '../core/contracts';
import { runTests } from '../tools/run_tests';
import { PROJECT_ROOT, prepareRun, tempDir, writeFiles } from './helpers/run-dir';
import { runOnce, startServer } from './helpers/temporal';

const FIXTURE = join(PROJECT_ROOT, 'fixtures', 'py-duration-junit');
const fixture = (): Fixture => fixtureSchema.parse(JSON.parse(readFileSync(join(FIXTURE, 'fixture.json'), 'utf8')));
const junitTests = (command: string[], timeout_s = 60): Partial<Fixture> => ({ tests: { command, format: 'junit', timeout_s } });

/** A repository folder: `from` copied (the fixture's repository, or only its vendored runner), plus `files`. */
function repoWith(from: string, files: Record<string, string> = {}): string {
  const repo = join(tempDir('junit-repo'), 'repo');
  cpSync(join(FIXTURE, 'repo', from), from === '' ? repo : join(repo, from), { recursive: true });
  writeFiles(repo, files);
  return repo;
}

describe('the junit format in fixture.json', () => {
  const base = JSON.parse(readFileSync(join(FIXTURE, 'fixture.json'), 'utf8')) as { tests: Record<string, unknown> };
  const issues = (tests: Record<string, unknown>) => {
    const parsed = fixtureSchema.safeParse({ ...base, tests: { ...base.tests, ...tests } });
    return parsed.success ? [] : parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
  };

  it('needs {junit} in the command, and only the junit format may use it', () => {
    expect(issues({})).toEqual([]);
    expect(issues({ command: ['python3', '-m', 'xmlrunner', 'discover'] })).toEqual([
      expect.stringMatching(/^tests\.command: the junit format needs \{junit\}/),
    ]);
    expect(issues({ format: 'pytest', command: ['python3', '-m', 'pytest', '--junitxml={junit}'] })).toEqual([
      expect.stringMatching(/only that format may use it/),
    ]);
    expect(issues({ format: 'mocha' })).toEqual([expect.stringMatching(/^tests\.format: /)]);
  });
});

describe('run_tests with the junit format', () => {
  it('counts red and green from the vendored runner, with the placeholder anywhere in an argument', async () => {
    const t = prepareRun({ repo: repoWith(''), fixture: fixture() });
    expect(await runTests(t.ctx, 'green')).toMatchObject({ ok: true, data: { status: 'passed', discovered: 7, passed: 7, failed: 0 } });

    const broken = prepareRun({
      repo: repoWith('', {
        'tests/test_more.py':
          'import unittest\n\nclass T(unittest.TestCase):\n    def test_ok(self):\n        pass\n\n    def test_bad(self):\n        self.assertEqual(1, 2)\n\n    def test_error(self):\n        raise RuntimeError("boom")\n',
      }),
      fixture: fixture(),
    });
    const red = await runTests(broken.ctx, 'red');
    expect(red).toMatchObject({ ok: false, error: 'tests_failed', data: { status: 'failed', discovered: 10, passed: 8, failed: 2 } });
    expect((red.data as { failures: { test: string }[] }).failures.map((f) => f.test).sort()).toEqual([
      'tests.test_more.T::test_bad',
      'tests.test_more.T::test_error',
    ]);

    // Another runner: Node's own JUnit reporter, its destination given as `--flag={junit}`.
    const node = prepareRun({
      repo: {
        'test/a.test.js':
          'const test = require("node:test");\ntest("one", () => {});\ntest("two", () => {});\ntest("three", () => { throw new Error("no"); });\n',
      },
      fixture: junitTests(['node', '--test', '--test-reporter=junit', '--test-reporter-destination={junit}', 'test/']),
    });
    expect(await runTests(node.ctx, 'node')).toMatchObject({
      ok: false,
      error: 'tests_failed',
      data: { discovered: 3, passed: 2, failed: 1 },
    });
  });

  it('reports zero discovered tests, a missing report and a timeout as incomplete', async () => {
    const empty = prepareRun({ repo: repoWith('xmlrunner', { 'tests/__init__.py': '' }), fixture: fixture() });
    expect(await runTests(empty.ctx, 'none')).toMatchObject({
      ok: false,
      error: 'tests_incomplete',
      data: { status: 'no_tests', discovered: 0 },
    });

    const silent = prepareRun({
      repo: { 'tests/x.txt': '' },
      fixture: junitTests(['python3', '-c', 'import sys; print("ran, wrote nothing:", sys.argv[1])', '{junit}']),
    });
    const missing = await runTests(silent.ctx, 'silent');
    expect(missing).toMatchObject({ ok: false, error: 'tests_incomplete', data: { status: 'error', discovered: 0 } });
    // The report's host path stays out of the result.
    expect((missing.data as { output_tail: string }).output_tail).toContain('ran, wrote nothing: <out>/junit.xml');

    const slow = prepareRun({
      repo: { 'tests/x.txt': '' },
      fixture: junitTests(['python3', '-c', 'import time; time.sleep(300)', '{junit}'], 2),
    });
    expect(await runTests(slow.ctx, 'slow')).toMatchObject({ ok: false, error: 'tests_incomplete', data: { status: 'timeout' } });
  });

  it('reports a folder where the report goes as an unusable report naming what it is, never as a missing report', async () => {
    const folder = prepareRun({ repo: { 'tests/x.txt': '' }, fixture: junitTests(['mkdir', '{junit}']) });
    expect(await runTests(folder.ctx, 'folder')).toMatchObject({
      ok: false,
      error: 'tests_incomplete',
      data: { status: 'error', detail: 'the test report <out>/junit.xml is a folder, not a regular file; it was not read' },
    });
  });
});

describe('the junit-format fixture end to end', () => {
  let env: TestWorkflowEnvironment;
  beforeAll(async () => {
    env = await startServer();
  });
  afterAll(async () => {
    await env?.teardown();
  });

  for (const backend of ['local', 'docker'] as const) {
    it(`completes on the ${backend} backend with exact counts, red first`, async () => {
      const input = {
        fixture: FIXTURE,
        source: { kind: 'replay', path: join(FIXTURE, 'replays', 'canonical.json'), trusted: true },
        backend,
        approver: 'policy:approve-writable',
      };
      const { outcome, transcript } = await runOnce(env, input);
      expect(outcome.record).toMatchObject({
        fixture: 'py-duration-junit',
        status: 'completed',
        reason: null,
        writes: 5,
        red_observed: true,
        candidate_tests: { discovered: 8, passed: 8, failed: 0 },
        acceptance: { total: 11, passed: 11, failed: [] },
      });
      type Entry = {
        decision?: { kind: string; call?: { name: string } };
        result?: { data: { status: string; discovered: number; failed: number } };
      };
      const runs = (transcript as Entry[])
        .filter((e) => e.decision?.call?.name === 'run_tests')
        .map((e) => e.result && [e.result.data.status, e.result.data.discovered, e.result.data.failed]);
      expect(runs).toEqual([
        ['failed', 8, 1],
        ['passed', 8, 0],
      ]);
    });
  }
});
