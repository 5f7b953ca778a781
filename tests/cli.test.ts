import { execFile, spawn } from 'node:child_process';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { temporalBinary } from '../host/temporal-bin';
import { readWorkerRecord } from '../host/background-worker';
import { launchChromium, testOutput } from './helpers/browser';
import { freePort, PROJECT_ROOT, tempDir, SETTINGS } from './helpers/run-dir';
import { ProviderServer, reply } from './helpers/provider-server';
import type { RunRecord } from '../core/contracts';
import { CANONICAL_RECORD, CURRENT_PROMPT, stopEmbedded, waitFor } from './helpers/temporal';

const exec = promisify(execFile);
const CLI = join(PROJECT_ROOT, 'dist', 'client', 'cli.js');

describe('npm run agent on the embedded default', () => {
  let stateDir: string;
  let env: NodeJS.ProcessEnv;
  let port: number;
  let uiPort: number;

  beforeAll(async () => {
    stateDir = tempDir('agent-cli');
    port = await freePort();
    uiPort = await freePort();
    env = {
      ...process.env,
      AGENT_TEST_CLI_KEY: 'sk-test-cli',
      AGENT_STATE_DIR: stateDir,
      AGENT_DEV_SERVER_PORT: String(port),
      AGENT_DEV_UI_PORT: String(uiPort),
    };
    delete env.TEMPORAL_ADDRESS;
  });

  afterAll(() => stopEmbedded(stateDir, port));

  const cli = (...args: string[]) => exec(process.execPath, [CLI, ...args], { env, cwd: PROJECT_ROOT, maxBuffer: 16 * 1024 * 1024 });

  it('runs the canonical fixture end to end and prints the run record', async () => {
    const { stdout, stderr } = await cli(
      'run',
      'fixtures/linkcheck-nested',
      '--replay',
      'fixtures/linkcheck-nested/replays/canonical.json',
      '--approver',
      'policy:approve-writable',
      '--wait',
      '--json',
      '--id',
      'cli-canonical',
    );
    expect(JSON.parse(stdout)).toEqual(CANONICAL_RECORD);
    // Progress is shown event by event on stderr while the run goes.
    expect(stderr).toMatch(/#1 run_started/);
    expect(stderr).toMatch(/approval_recorded .*approve by policy:approve-writable/);

    // The temporal CLI finds the run by its status search attribute, and the Web UI answers.
    const listed = await exec(temporalBinary(SETTINGS), [
      'workflow',
      'list',
      '--address',
      `127.0.0.1:${port}`,
      '--query',
      'AgentStatus="completed"',
      '-o',
      'json',
    ]);
    expect(listed.stdout).toContain('cli-canonical');
    const ui = await fetch(`http://127.0.0.1:${uiPort}/`);
    expect(ui.status).toBe(200);

    const status = await cli('status', 'cli-canonical', '--json');
    expect(JSON.parse(status.stdout)).toMatchObject({ status: 'completed', counters: { writes: 2, receipts: 2 } });
    const trace = JSON.parse((await cli('trace', 'cli-canonical', '--json')).stdout) as { seq: number; type: string }[];
    expect(trace[0]).toMatchObject({ seq: 1, type: 'run_started' });
    expect(trace.at(-1)!.type).toBe('run_finished');

    // The trace carries views of tool results; --full resolves them from the host store.
    const source = readFileSync(join(PROJECT_ROOT, 'fixtures/linkcheck-nested/repo/src/linkcheck.py'), 'utf8');
    const readOf = (events: { type: string; call_id?: string; data: any }[]) =>
      events.find((e) => e.type === 'tool_observed' && e.call_id === 'read-source')!.data;
    const brief = readOf(trace as never);
    expect(brief.data.text).toMatch(/… \[\d+ more characters\]$/);
    expect(brief.ref).toMatch(/^[0-9a-f]{64}$/);
    const full = JSON.parse((await cli('trace', 'cli-canonical', '--full', '--json')).stdout);
    expect(readOf(full)).toMatchObject({
      call_id: 'read-source',
      ok: true,
      data: { text: source, total_lines: source.split('\n').length - 1 },
      ref: brief.ref,
    });
    expect(full.map((e: { seq: number }) => e.seq)).toEqual(trace.map((e) => e.seq));
    const printed = (await cli('trace', 'cli-canonical', '--full')).stdout;
    expect(printed).toMatch(/#\d+ tool_observed \[read-source\] ok lines 1-\d+ of \d+/);
  });

  it.each(['openai', 'anthropic'] as const)(
    'runs the canonical fixture with --provider %s against a local server, then exports it as a replay that re-runs alike',
    async (api) => {
      const canonical = JSON.parse(readFileSync(join(PROJECT_ROOT, 'fixtures/linkcheck-nested/replays/canonical.json'), 'utf8'))
        .decisions as { kind: string; text?: string; call?: { call_id: string; name: string; arguments: unknown } }[];
      const replies = canonical
        .filter((d) => d.kind !== 'plan')
        .map((d) =>
          d.kind === 'tool' ? { calls: [{ id: d.call!.call_id, name: d.call!.name, arguments: d.call!.arguments }] } : { text: d.text },
        );
      // Each request is answered by its conversation's turn (the assistant messages it holds).
      const server = await new ProviderServer((request) => {
        const turn = (request.body.messages as { role: string }[]).filter((m) => m.role === 'assistant').length;
        return { body: reply(api, replies[turn] ?? { text: 'done' }) };
      }).start();
      // The live source, the same for the run and (openai) the batch.
      const live = [
        '--provider',
        api,
        '--model',
        'test-model',
        '--base-url',
        api === 'openai' ? `${server.url}/v1` : server.url,
        '--api-key-env',
        'AGENT_TEST_CLI_KEY',
        '--backend',
        'docker',
      ];
      try {
        const id = `cli-live-${api}`;
        const { stdout } = await cli(
          'run',
          'fixtures/linkcheck-nested',
          ...live,
          '--approver',
          'policy:approve-writable',
          '--wait',
          '--json',
          '--id',
          id,
        );
        const record = JSON.parse(stdout);
        expect(record).toEqual({
          ...CANONICAL_RECORD,
          replay: null,
          turns: 7,
          usage: { model_calls: 7, input_tokens: 700, output_tokens: 140, cached_tokens: 0, cost_usd: null },
          prompt: CURRENT_PROMPT,
        });
        expect(server.count()).toBe(7);

        const exported = join(tempDir('exported'), `${id}.json`);
        writeFileSync(exported, (await cli('export-replay', id)).stdout);
        const again = JSON.parse(
          (
            await cli(
              'run',
              'fixtures/linkcheck-nested',
              '--replay',
              exported,
              '--trust-replay',
              '--approver',
              'policy:approve-writable',
              '--wait',
              '--json',
            )
          ).stdout,
        );
        // The exported replay takes the live session's seven replies as its turns.
        expect(again).toEqual({ ...CANONICAL_RECORD, replay: id, turns: 7 });

        if (api === 'openai') {
          // The same shortcut makes a live batch, through the endpoint the run added.
          const evalOut = tempDir('cli-live-eval');
          const batch = await cli('eval', 'fixtures/linkcheck-nested', ...live, '--out', evalOut);
          expect(batch.stderr).toMatch(/endpoint \S+ \(openai, key from AGENT_TEST_CLI_KEY\) found in /);
          const report = JSON.parse(readFileSync(join(evalOut, 'report.json'), 'utf8')) as {
            runs: { replay: string | null; status: string }[];
          };
          expect(report.runs).toEqual([expect.objectContaining({ replay: null, status: 'completed' })]);
          expect(server.count()).toBe(14);
        }
      } finally {
        await server.close();
      }
    },
  );

  it('asks at the terminal for each write, showing the action, the path, the diff and the digests', async () => {
    const child = spawn(
      process.execPath,
      [CLI, 'run', 'fixtures/linkcheck-nested', '--replay', 'fixtures/linkcheck-nested/replays/canonical.json', '--wait'],
      { env, cwd: PROJECT_ROOT },
    );
    let output = '';
    let answered = 0;
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const asked = output.split('Approve this write? [y/N]').length - 1;
      while (answered < asked) {
        child.stdin.write('y\n');
        answered++;
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    expect(code).toBe(0);
    expect(answered).toBe(2);
    expect(output).toContain('apply_patch tests/test_agent_nested.py');
    expect(output).toContain('apply_patch src/linkcheck.py');
    expect(output).toMatch(/action_id +[0-9a-f]{64}/);
    expect(output).toMatch(/workspace_digest [0-9a-f]{64}/);
    expect(output).toContain('+            candidate = document.parent / target');
    expect(output).toMatch(/approve by user:/);
    expect(output).toMatch(/completed: 2 writes, 2 receipts/);
  });

  it('exits non-zero for a run that does not complete', async () => {
    await expect(
      cli(
        'run',
        'fixtures/linkcheck-nested',
        '--replay',
        'fixtures/linkcheck-nested/replays/no-work.json',
        '--approver',
        'policy:approve-writable',
        '--wait',
        '--json',
      ),
    ).rejects.toMatchObject({ code: 1 });
  });

  it('refuses an untrusted replay outside the trusted folders on the local backend', async () => {
    const replay = join(tempDir('replay'), 'outside.json');
    require('node:fs').copyFileSync(join(PROJECT_ROOT, 'fixtures/linkcheck-nested/replays/canonical.json'), replay);
    const failed = await cli(
      'run',
      'fixtures/linkcheck-nested',
      '--replay',
      replay,
      '--approver',
      'policy:approve-writable',
      '--wait',
      '--json',
    ).catch((e) => e);
    expect(failed.code).toBe(1);
    expect(JSON.parse(failed.stdout)).toMatchObject({ status: 'failed', reason: 'replay_untrusted', writes: 0 });
  });

  let evalOut: string | undefined;

  it('evaluates a batch as a parent workflow with a byte-identical report.json for the same inputs', async () => {
    const outA = tempDir('eval-a');
    evalOut = outA;
    const outB = tempDir('eval-b');
    await cli('eval', 'fixtures/linkcheck-nested', 'fixtures/wordcount-node', '--out', outA, '--concurrency', '3');
    await cli('eval', 'fixtures/wordcount-node', 'fixtures/linkcheck-nested', '--out', outB, '--concurrency', '1');
    const a = readFileSync(join(outA, 'report.json'), 'utf8');
    expect(readFileSync(join(outB, 'report.json'), 'utf8')).toBe(a);
    const report = JSON.parse(a);
    expect(report.runs.map((r: { fixture: string; replay: string; status: string }) => [r.fixture, r.replay, r.status])).toEqual([
      ['linkcheck-nested', 'always-empty', 'failed'],
      ['linkcheck-nested', 'canonical', 'completed'],
      ['linkcheck-nested', 'no-work', 'failed'],
      ['wordcount-node', 'canonical', 'completed'],
      ['wordcount-node', 'wrong-fix', 'failed'],
    ]);
    expect(report.summary).toEqual({ runs: 5, completed: 2, failed: 3 });
    expect(readFileSync(join(outA, 'report.md'), 'utf8')).toContain('| linkcheck-nested | canonical | 1 | completed |');
    expect(readFileSync(join(outA, 'report.html'), 'utf8')).toContain('"replay":"canonical"');
    expect(JSON.parse(readFileSync(join(outA, 'timings.json'), 'utf8'))).toMatchObject({ runs: 5, concurrency: 3 });
    // The build that ran each run is in timings.json and report.html; report.json stays the same across builds.
    const build = readWorkerRecord(stateDir)!.build;
    const timings = JSON.parse(readFileSync(join(outA, 'timings.json'), 'utf8')) as { build: string; run_builds: Record<string, string[]> };
    expect(timings.build).toBe(build);
    expect(Object.values(timings.run_builds)).toEqual(new Array(5).fill([build]));
    expect(readFileSync(join(outA, 'report.html'), 'utf8')).toContain(`"builds":["${build}"]`);
    expect(a).not.toContain(build.split('+')[1]);
  });

  it('report.html opens from disk in headless Chromium: every run a row, the status filter, a screenshot', async () => {
    expect(evalOut).toBeDefined();
    const report = JSON.parse(readFileSync(join(evalOut!, 'report.json'), 'utf8')) as { runs: { status: string }[] };
    const browser = await launchChromium();
    try {
      const { page, outside } = await browser.newPage();
      const requests: string[] = [];
      page.on('request', (r) => requests.push(r.url()));
      const errors: string[] = [];
      page.on('pageerror', (e) => errors.push(e.message));
      await page.goto(pathToFileURL(join(evalOut!, 'report.html')).href);
      expect(await page.locator('#runs tbody tr.run').count()).toBe(report.runs.length);
      expect(await page.textContent('#shown')).toBe(`${report.runs.length} of ${report.runs.length} runs shown`);
      expect(await page.locator('#summary .card').first().textContent()).toBe(`${report.runs.length}runs`);

      await page.selectOption('#status-filter', 'completed');
      const completed = report.runs.filter((r) => r.status === 'completed').length;
      expect(completed).toBeGreaterThan(0);
      expect(completed).toBeLessThan(report.runs.length);
      expect(await page.locator('#runs tbody tr.run').count()).toBe(completed);
      expect(await page.locator('#runs tbody td.status').allTextContents()).toEqual(Array(completed).fill('completed'));
      expect(await page.textContent('#shown')).toBe(`${completed} of ${report.runs.length} runs shown`);

      // Sorting by status, descending, then back to every run: failed rows come first.
      await page.selectOption('#status-filter', '');
      await page.click('th[data-column="status"]');
      await page.click('th[data-column="status"]');
      expect(await page.locator('#runs tbody td.status').first().textContent()).toBe('failed');
      // Each run links to the Temporal Web UI and carries its trace.
      const link = await page.locator('#runs tbody tr.run a').first().getAttribute('href');
      expect(link).toMatch(new RegExp(`^http://localhost:${uiPort}/namespaces/default/workflows/eval-`));
      expect(await page.locator('#runs tbody tr.run details summary').first().textContent()).toMatch(/^\d+ events$/);

      const shot = testOutput('report-html.png');
      await page.screenshot({ path: shot, fullPage: true });
      expect(statSync(shot).size).toBeGreaterThan(1000);
      expect(errors).toEqual([]);
      // Self-contained: the page fetched nothing but itself.
      expect(requests.filter((u) => !u.startsWith('file:'))).toEqual([]);
      expect(outside.aborted).toEqual([]);
      // The link opens the run in the dev server's Web UI, which asks nothing of the outside world.
      const ui = await browser.newPage();
      expect((await ui.page.goto(link!))?.status()).toBe(200);
      await ui.page.waitForLoadState('networkidle');
      expect(ui.outside.aborted).toEqual([]);
    } finally {
      await browser.close();
    }
  });

  it("the Web UI shows an orchestrating run's two tasks under it (Relationships)", async () => {
    const id = `cli-subruns-${process.pid}`;
    const { stdout } = await cli(
      'run',
      'fixtures/py-two-modules',
      '--replay',
      'fixtures/py-two-modules/replays/canonical.json',
      '--approver',
      'policy:approve-writable',
      '--wait',
      '--json',
      '--id',
      id,
    );
    const record = JSON.parse(stdout) as RunRecord;
    expect(record).toMatchObject({ status: 'completed', subruns: { dispatched: 2, merges: 2 } });
    const tasks = record.tasks!.map((t) => t.task_id);
    expect(tasks).toHaveLength(2);

    const browser = await launchChromium();
    try {
      const { page, outside } = await browser.newPage();
      // The run's page redirects to its latest run id; the Relationships tab lists its children.
      await page.goto(`http://127.0.0.1:${uiPort}/namespaces/default/workflows/${encodeURIComponent(id)}`);
      await page.waitForURL(/\/workflows\/[^/]+\/[0-9a-f-]{36}\//);
      const runId = /\/workflows\/[^/]+\/([0-9a-f-]{36})\//.exec(page.url())![1];
      await page.goto(`http://127.0.0.1:${uiPort}/namespaces/default/workflows/${encodeURIComponent(id)}/${runId}/relationships`);
      await page.getByText('Child Count').first().waitFor();
      for (const task of tasks) await page.getByText(task, { exact: true }).first().waitFor();
      const text = await page.innerText('body');
      expect(text).toMatch(/Child Count\s+2\b/);
      for (const task of tasks) expect(text).toContain(task);
      await page.screenshot({ path: testOutput('web-ui-relationships.png'), fullPage: true });
      expect(outside.aborted).toEqual([]);
    } finally {
      await browser.close();
    }
  });

  it('eval watch follows a batch started from another terminal to its end, in plain lines off a terminal', async () => {
    const batch = `watched-${process.pid}`;
    const started = cli(
      'eval',
      'fixtures/linkcheck-nested',
      'fixtures/wordcount-node',
      '--batch',
      batch,
      '--concurrency',
      '1',
      '--out',
      tempDir('eval-watch'),
    );
    // The batch may not exist yet: `watch` of an unknown id fails, so try until it follows.
    const watched = await waitFor('eval watch to follow the batch', () => cli('eval', 'watch', batch).catch(() => null), 60_000);
    await started;
    expect(JSON.parse(watched.stdout)).toMatchObject({
      total: 5,
      done: 5,
      completed: 2,
      running: 0,
      by_status: { completed: 2, failed: 3 },
    });
    const lines = watched.stderr.split('\n').filter((l) => l.startsWith(batch));
    expect(watched.stderr).not.toContain('\r');
    expect(lines.at(-1)).toMatch(new RegExp(`^${batch} \\[#{24}\\] 5/5 done, 2 completed, 0 running`));
  });

  it('explains usage errors precisely', async () => {
    expect((await cli('run', '--help')).stdout).toContain('usage: npm run agent -- run <fixture-dir>');
    await expect(cli('frobnicate')).rejects.toMatchObject({ code: 2 });
    const missing = await cli('run', 'fixtures/linkcheck-nested').catch((e) => e);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('--replay FILE or --provider NAME is required');
    const notNumber = await cli(
      'run',
      'fixtures/linkcheck-nested',
      '--replay',
      'fixtures/linkcheck-nested/replays/canonical.json',
      '--max-turns',
      'x',
    ).catch((e) => e);
    expect(notNumber.code).toBe(2);
    expect(notNumber.stderr).toContain('--max-turns must be a positive integer, got "x"');
    // A live batch names one source, with a model, on the docker backend.
    const live = ['eval', 'fixtures/linkcheck-nested', '--model', 'm', '--backend', 'docker'];
    for (const [args, error] of [
      [['--endpoint', 'e', '--provider', 'openai'], '--endpoint and --provider exclude each other'],
      [['--base-url', 'http://127.0.0.1:9/v1', '--endpoint', 'e'], '--base-url and --api-key-env go with --provider'],
      [[], '--model goes with --endpoint or --provider'],
    ] as const) {
      const refused = await cli(...live, ...args).catch((e) => e);
      expect(refused).toMatchObject({ code: 2, stderr: expect.stringContaining(error) });
    }
  });
});
