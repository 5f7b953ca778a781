/**
 * The embedded default as a newcomer meets it: the dev server it starts stays quiet (no version
 * check, no news feed), and the state folder has one background worker that answers only while it
 * runs this build with this shell's provider variables.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, cpSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { Client } from '@temporalio/client';
import { connectClient } from '../host/connection';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { temporalBinary } from '../host/temporal-bin';
import { processAlive } from '../host/processes';
import { readWorkerRecord } from '../host/background-worker';
import { queryState, queryTrace, runHandle } from '../client/run-access';
import { ProviderServer, reply } from './helpers/provider-server';
import { freePort, LINKCHECK, PROJECT_ROOT, tempDir, SETTINGS } from './helpers/run-dir';
import { CANONICAL_RECORD, CURRENT_PROMPT, killed, stopEmbedded, waitFor } from './helpers/temporal';

const exec = promisify(execFile);

let stateDir: string;
let env: NodeJS.ProcessEnv;

beforeAll(async () => {
  stateDir = tempDir('agent-embedded');
  env = {
    ...process.env,
    AGENT_STATE_DIR: stateDir,
    AGENT_DEV_SERVER_PORT: String(await freePort()),
    AGENT_DEV_UI_PORT: String(await freePort()),
  };
  delete env.TEMPORAL_ADDRESS;
  delete env.NEWCOMER_KEY;
});

afterAll(() => stopEmbedded(stateDir, env.AGENT_DEV_SERVER_PORT!));

/** The command line of a build (`root` holds its dist/ and package.json). */
const cli = (args: string[], extra: NodeJS.ProcessEnv = {}, root = PROJECT_ROOT) =>
  exec(process.execPath, [join(root, 'dist', 'client', 'cli.js'), ...args], {
    env: { ...env, ...extra },
    cwd: PROJECT_ROOT,
    maxBuffer: 16 * 1024 * 1024,
  });

describe('the embedded default', () => {
  it('starts a dev server whose version check and Web UI news feed are off', async () => {
    const { stdout } = await cli([
      'run',
      'fixtures/linkcheck-nested',
      '--replay',
      'fixtures/linkcheck-nested/replays/canonical.json',
      '--approver',
      'policy:approve-writable',
      '--id',
      'quiet-server',
    ]);
    expect(stdout.trim()).toBe('quiet-server');
    const pid = Number(readFileSync(join(stateDir, 'temporal-server.pid'), 'utf8'));
    const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    expect(argv).toContain('start-dev');
    expect(argv[argv.indexOf('--dynamic-config-value') + 1]).toBe('frontend.enableServerVersionCheck=false');
    expect(argv).toContain('--ui-disable-news-fetch');
    expect(readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0')).toContain('TEMPORAL_VERSION_CHECK_DISABLED=1');
    const done = await waitFor('the run to end', async () => {
      const status = JSON.parse((await cli(['status', 'quiet-server', '--json'])).stdout);
      return status.status === 'completed' ? status : null;
    });
    expect(done.counters).toMatchObject({ writes: 2, receipts: 2 });
  });

  it('replaces a background worker started without the key of a live run, and one of an older build', async () => {
    // A newcomer opens the console first: it starts the background worker, without any key.
    const consoleProcess: ChildProcess = spawn(
      process.execPath,
      [join(PROJECT_ROOT, 'dist', 'client', 'cli.js'), 'console', '--port', '0'],
      { env, cwd: PROJECT_ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let printed = '';
    consoleProcess.stdout!.on('data', (c: Buffer) => (printed += c.toString()));
    consoleProcess.stderr!.on('data', (c: Buffer) => (printed += c.toString()));
    const first = await waitFor('the console to start', async () => (/console on http/.test(printed) ? readWorkerRecord(stateDir) : null));
    expect(processAlive(first)).toBe(true);

    // Then a live run with the key only in this shell: the worker that lacks it is replaced.
    const canonical = JSON.parse(readFileSync(join(LINKCHECK, 'replays', 'canonical.json'), 'utf8')).decisions as {
      kind: string;
      text?: string;
      call?: { call_id: string; name: string; arguments: unknown };
    }[];
    const replies = canonical
      .filter((d) => d.kind !== 'plan')
      .map((d) =>
        d.kind === 'tool' ? { calls: [{ id: d.call!.call_id, name: d.call!.name, arguments: d.call!.arguments }] } : { text: d.text },
      );
    const server = await new ProviderServer((_req, i) => ({ body: reply('openai', replies[i] ?? { text: 'done' }) })).start();
    let second;
    try {
      const { stdout, stderr } = await cli(
        [
          'run',
          'fixtures/linkcheck-nested',
          '--provider',
          'openai',
          '--model',
          'test-model',
          '--base-url',
          `${server.url}/v1`,
          '--api-key-env',
          'NEWCOMER_KEY',
          '--backend',
          'docker',
          '--approver',
          'policy:approve-writable',
          '--wait',
          '--json',
          '--id',
          'newcomer-live',
        ],
        { NEWCOMER_KEY: 'sk-test-newcomer' },
      );
      expect(JSON.parse(stdout)).toEqual({
        ...CANONICAL_RECORD,
        replay: null,
        turns: 7,
        usage: { model_calls: 7, input_tokens: 700, output_tokens: 140, cached_tokens: 0, cost_usd: null },
        prompt: CURRENT_PROMPT,
      });
      expect(stderr).toMatch(/endpoint openai-[0-9a-f]{8} \(openai, key from NEWCOMER_KEY\) added to /);
      expect(stderr).toMatch(/replaced the background worker \d+ .*because its provider variables differ/);
      expect(server.count()).toBe(7);
      expect(new Set(server.requests.map((r) => r.headers.authorization))).toEqual(new Set(['Bearer sk-test-newcomer']));
      second = readWorkerRecord(stateDir)!;
      expect(second.pid).not.toBe(first.pid);
      expect(processAlive(first)).toBe(false);
    } finally {
      await server.close();
      consoleProcess.kill('SIGTERM');
      await killed(consoleProcess);
    }

    // A rebuild after a source change (a copy of the build with one compiled file changed): the
    // next command replaces the worker, and `status` names the new build.
    const root = tempDir('rebuilt');
    cpSync(join(PROJECT_ROOT, 'dist'), join(root, 'dist'), {
      recursive: true,
      filter: (src) => !src.startsWith(join(PROJECT_ROOT, 'dist', 'tests')),
    });
    cpSync(join(PROJECT_ROOT, 'package.json'), join(root, 'package.json'));
    symlinkSync(join(PROJECT_ROOT, 'node_modules'), join(root, 'node_modules'));
    mkdirSync(join(root, '.agent-state'));
    appendFileSync(join(root, 'dist', 'core', 'trace.js'), '\n// changed\n');
    const tools = {
      TEMPORAL_BIN: temporalBinary(SETTINGS),
      AGENT_TOOLS_DIR: join(PROJECT_ROOT, '.agent-state', 'tools'),
      NEWCOMER_KEY: 'sk-test-newcomer',
    };
    const next = await cli(
      [
        'run',
        'fixtures/linkcheck-nested',
        '--replay',
        'fixtures/linkcheck-nested/replays/canonical.json',
        '--trust-replay',
        '--approver',
        'policy:approve-writable',
        '--wait',
        '--json',
        '--id',
        'after-rebuild',
      ],
      tools,
      root,
    );
    expect(JSON.parse(next.stdout)).toEqual(CANONICAL_RECORD);
    const third = readWorkerRecord(stateDir)!;
    expect(third.pid).not.toBe(second.pid);
    expect(third.build).not.toBe(second.build);
    expect(next.stderr).toContain(
      `replaced the background worker ${third.pid} (build ${third.build}): the previous one was replaced because it runs build ${second.build}`,
    );
    const status = await cli(['status', 'newcomer-live'], tools, root);
    expect(status.stdout).toContain('newcomer-live: completed');
    expect(status.stdout).toMatch(
      new RegExp(
        `served by worker ${third.pid}@\\S+ build ${third.build.replace(/[.+]/g, '\\$&')} \\(the background worker of this state folder\\)`,
      ),
    );
  });

  it('follows a 1,000-turn session of small reads from its start on stock settings, every Query answer under 64 KiB', async () => {
    const decisions = [
      ...Array.from({ length: 1000 }, (_, i) => ({
        kind: 'tool',
        call: { call_id: `read-${i}`, name: 'read_file', arguments: { path: 'src/linkcheck.py', start: 1 + (i % 5), end: 2 + (i % 5) } },
      })),
      { kind: 'final', text: 'read a lot, fixed nothing' },
    ];
    const replay = join(tempDir('long-session'), 'reads.json');
    writeFileSync(replay, JSON.stringify({ schema_version: 1, decisions }));
    const id = 'thousand-reads';
    // The run ends verification_failed (it fixes nothing), so the command exits 1 with the record.
    const following = cli([
      'run',
      'fixtures/linkcheck-nested',
      '--replay',
      replay,
      '--trust-replay',
      '--approver',
      'policy:approve-writable',
      '--max-turns',
      '1001',
      '--max-tool-calls',
      '1001',
      '--deadline-s',
      '3600',
      '--wait',
      '--json',
      '--id',
      id,
    ]).then(
      () => {
        throw new Error('a run that fixes nothing must not exit 0');
      },
      (err: { code: number; stdout: string; stderr: string }) => err,
    );
    // Meanwhile a second client reads the run as `status`, `follow` and the console do, and keeps the largest answer.
    const connection = await connectClient({ address: `127.0.0.1:${env.AGENT_DEV_SERVER_PORT}` });
    let largest = 0;
    let reads = 0;
    let finished: number | null = null;
    const watching = (async () => {
      const handle = runHandle(new Client({ connection }), id);
      let after = 0;
      // Under load a Query may wait its turn for seconds: a closed run is read on until enough answers were seen.
      while (finished === null || (reads <= 10 && Date.now() - finished < 60_000)) {
        try {
          largest = Math.max(largest, JSON.stringify(await queryState(handle)).length);
          reads++;
          for (let page = await queryTrace(handle, { after }); ; page = await queryTrace(handle, { after })) {
            largest = Math.max(largest, JSON.stringify(page).length);
            reads++;
            after = page.events.at(-1)?.seq ?? after;
            if (page.next === null) break;
          }
        } catch {
          // not started yet, between segments, or closed
        }
        // The run takes seconds (its reads are local activities): read often enough to see it grow.
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    try {
      const { code, stdout, stderr } = await following;
      expect(code).toBe(1);
      const record = JSON.parse(stdout);
      expect(record).toMatchObject({
        fixture: 'linkcheck-nested',
        replay: 'reads',
        status: 'failed',
        reason: 'verification_failed',
        writes: 0,
        tool_errors: {},
      });
      expect(stderr).toContain('#1 run_started');
      expect(stderr).toMatch(/read-999\] ok lines/);
      // Every event printed once, in order, though the follower fell behind the run's window
      // (the rest came from the host store) and its reader here is slower than the run.
      const printed = (stderr.match(/^#\d+ /gm) ?? []).map((line) => Number(line.slice(1)));
      if (printed.length <= 3000) {
        // Say what was printed instead, so a failure under load can be read from its log alone.
        const lines = stderr.split('\n');
        const events = lines.filter((l) => /^#\d+ /.test(l));
        throw new Error(
          `${printed.length} events printed; the last: ${JSON.stringify(events.slice(-3))}; other lines: ${JSON.stringify(lines.filter((l) => !/^#\d+ /.test(l)).slice(0, 40))}`,
        );
      }
      expect(printed.every((seq, i) => seq === i + 1)).toBe(true);
      const segments = (stderr.match(/continued_as_new/g) ?? []).length;
      console.log(`1,000-turn session: ${segments} continue-as-new, ${reads} Query answers read, largest Query answer ${largest} bytes`);
    } finally {
      finished = Date.now();
      await watching;
      await connection.close();
    }
    expect(reads).toBeGreaterThan(10);
    expect(largest).toBeGreaterThan(1000);
    expect(largest).toBeLessThan(64 * 1024);
  }, 1_200_000);
});
