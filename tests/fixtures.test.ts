/**
 * The fixture set as an evaluation suite: every fixture is well formed, and the acceptance run
 * `npm run agent -- eval fixtures --epochs 2 --out OUT` on the embedded default completes every
 * canonical replay and fails every other replay with `verification_failed`; each fixture has a
 * wrong fix that passes its visible tests and only the hidden acceptance catches.
 */
import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { fixtureSchema, replaySchema, type Fixture } from '../core/contracts';
import { freePort, PROJECT_ROOT, tempDir } from './helpers/run-dir';
import { stopEmbedded } from './helpers/temporal';

const exec = promisify(execFile);
const FIXTURES = join(PROJECT_ROOT, 'fixtures');
const CLI = join(PROJECT_ROOT, 'dist', 'client', 'cli.js');

const fixtureDirs = readdirSync(FIXTURES)
  .filter((d) => existsSync(join(FIXTURES, d, 'fixture.json')))
  .sort();
const load = (dir: string): Fixture => fixtureSchema.parse(JSON.parse(readFileSync(join(FIXTURES, dir, 'fixture.json'), 'utf8')));
const replaysOf = (dir: string) =>
  readdirSync(join(FIXTURES, dir, 'replays'))
    .filter((f) => f.endsWith('.json'))
    .map((f) => f.slice(0, -5))
    .sort();
const language = (f: Fixture) => (f.tests.command[0] === 'node' ? 'node' : f.tests.command[0].startsWith('python') ? 'python' : 'other');

function filesUnder(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...filesUnder(path));
    else if (entry.isFile()) out.push(path);
  }
  return out;
}

describe('the fixtures', () => {
  it('are at least 12, in Python and Node, each with a canonical replay and another', () => {
    expect(fixtureDirs.length).toBeGreaterThanOrEqual(12);
    const fixtures = fixtureDirs.map(load);
    expect(fixtures.map((f) => f.id)).toEqual(fixtureDirs);
    const languages = fixtures.map(language);
    expect(languages.filter((l) => l === 'python').length).toBeGreaterThanOrEqual(4);
    expect(languages.filter((l) => l === 'node').length).toBeGreaterThanOrEqual(4);
    for (const dir of fixtureDirs) {
      const replays = replaysOf(dir);
      expect([dir, replays.includes('canonical'), replays.length >= 2]).toEqual([dir, true, true]);
      for (const r of replays) replaySchema.parse(JSON.parse(readFileSync(join(FIXTURES, dir, 'replays', `${r}.json`), 'utf8')));
      const expected = JSON.parse(readFileSync(join(FIXTURES, dir, 'acceptance', 'expected.json'), 'utf8'));
      expect(Object.keys(expected.cases).length).toBeGreaterThanOrEqual(2);
      // Hidden acceptance never sits in the repository the workspace is copied from.
      expect(existsSync(join(FIXTURES, dir, 'repo', 'acceptance'))).toBe(false);
    }
  });

  it('include at least 4 from real projects, each naming its source and keeping its license', () => {
    const real = fixtureDirs.map(load).filter((f) => f.origin !== undefined);
    expect(real.length).toBeGreaterThanOrEqual(4);
    for (const f of real) {
      expect(f.origin!.repository).toMatch(/^https:\/\/github\.com\/[\w.-]+\/[\w.-]+$/);
      expect(f.origin!.fix_commit).not.toBe(f.origin!.base_commit);
      expect(statSync(join(FIXTURES, f.id, 'repo', f.origin!.license)).size).toBeGreaterThan(100);
    }
    expect(new Set(real.map(language))).toEqual(new Set(['python', 'node']));
    // One with a real pytest configuration in use.
    expect(
      real.some(
        (f) =>
          existsSync(join(FIXTURES, f.id, 'repo', 'conftest.py')) ||
          filesUnder(join(FIXTURES, f.id, 'repo')).some((p) => p.endsWith('/conftest.py')),
      ),
    ).toBe(true);
  });

  it('carry no machine paths and no caches', () => {
    for (const dir of fixtureDirs) {
      for (const file of filesUnder(join(FIXTURES, dir))) {
        expect(file).not.toMatch(/__pycache__|\.pyc$|\.pytest_cache|node_modules\/\.cache/);
        if (statSync(file).size > 512 * 1024) continue;
        expect([file, /(^|[^\w.])\/(work|root|tmp)\/[\w.-]+\//.test(readFileSync(file, 'latin1'))]).toEqual([file, false]);
      }
    }
  });
});

interface ReportRun {
  fixture: string;
  replay: string;
  epoch: number;
  status: string;
  reason: string | null;
  writes: number;
  candidate_tests: { discovered: number; passed: number; failed: number } | null;
  acceptance: { total: number; passed: number; failed: string[] } | null;
}

describe('npm run agent -- eval fixtures --epochs 2 --out OUT', () => {
  let stateDir: string;
  let port: number;
  let out: string;
  let report: {
    runs: ReportRun[];
    summary: {
      runs: number;
      completed: number;
      failed: number;
      epochs: number;
      flaky: unknown[];
      per_fixture: { fixture: string; replay: string; pass_at_1: number; pass_at_k: number }[];
    };
  };

  beforeAll(async () => {
    stateDir = tempDir('agent-fixtures');
    out = tempDir('eval-fixtures');
    port = await freePort();
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      AGENT_STATE_DIR: stateDir,
      AGENT_DEV_SERVER_PORT: String(port),
      AGENT_DEV_UI_PORT: String(await freePort()),
    };
    delete env.TEMPORAL_ADDRESS;
    const started = Date.now();
    await exec(process.execPath, [CLI, 'eval', 'fixtures', '--epochs', '2', '--out', out, '--concurrency', '4'], {
      env,
      cwd: PROJECT_ROOT,
      maxBuffer: 64 * 1024 * 1024,
    });
    console.log(`eval fixtures --epochs 2: ${fixtureDirs.length} fixtures in ${((Date.now() - started) / 1000).toFixed(1)} s`);
    report = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8'));
  }, 900_000);

  afterAll(() => stopEmbedded(stateDir, port));

  it('writes report.json, report.md, report.html and timings.json', () => {
    for (const f of ['report.json', 'report.md', 'report.html', 'timings.json']) expect(statSync(join(out, f)).size).toBeGreaterThan(100);
    const planned = fixtureDirs.reduce((n, d) => n + replaysOf(d).length, 0) * 2;
    expect(report.summary).toMatchObject({ runs: planned, epochs: 2, flaky: [] });
  });

  it('completes every canonical replay and fails every other with verification_failed', () => {
    const outcome = (r: ReportRun) => `${r.fixture}/${r.replay}/e${r.epoch}: ${r.status}${r.reason ? `/${r.reason}` : ''}`;
    const expected = report.runs.map(
      (r) => `${r.fixture}/${r.replay}/e${r.epoch}: ${r.replay === 'canonical' ? 'completed' : 'failed/verification_failed'}`,
    );
    expect(report.runs.map(outcome)).toEqual(expected);
    for (const p of report.summary.per_fixture)
      expect([p.fixture, p.replay, p.pass_at_1]).toEqual([p.fixture, p.replay, p.replay === 'canonical' ? 1 : 0]);
  });

  it('has, per fixture, a wrong fix that passes the visible tests and only hidden acceptance catches', () => {
    for (const dir of fixtureDirs) {
      const caught = report.runs.filter(
        (r) =>
          r.fixture === dir &&
          r.replay !== 'canonical' &&
          r.writes > 0 &&
          r.candidate_tests !== null &&
          r.candidate_tests.discovered > 0 &&
          r.candidate_tests.failed === 0 &&
          r.acceptance !== null &&
          r.acceptance.failed.length > 0,
      );
      expect([dir, caught.length > 0]).toEqual([dir, true]);
    }
    // A repository with hundreds of tests among them.
    expect(Math.max(...report.runs.map((r) => r.candidate_tests?.discovered ?? 0))).toBeGreaterThanOrEqual(200);
  });
});
