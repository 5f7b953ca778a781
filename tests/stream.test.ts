/**
 * A run's event stream on the console (docs/delivery.md), against a real dev server, real worker
 * processes and a real headless Chromium: two clients follow one run (a plain HTTP client of this
 * file and the console's run page), the first cut off and resumed with Last-Event-ID, the worker
 * SIGKILLed mid-run, the console closing every stream after a few seconds so both reconnect again
 * and again; the frames each received, put together, are the run's stored trace with no duplicate
 * and no gap. An approval sent from one client shows as resolved on the other (the time is
 * printed). A client that declares frame version 1 gets no later frame. Actions repeated under one
 * idempotency id answer the first outcome and act once, even through a second console that never
 * saw the first; the list of pending approvals shows an approval sent by another client; `status
 * --follow` and `run --follow` (asking for each write at the terminal) read the same stream. Credentials, versions and ids that are
 * not as the contract says are refused.
 */
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { Page } from 'playwright-core';
import { startConsole, type RunningConsole } from '../client/console/server';
import { API_TOKENS_FILE, readApiTokens } from '../client/console/token';
import { LIVE_SCRIPT } from '../client/console/live-script';
import * as access from '../client/run-access';
import { openStore } from '../store/store';
import { storedTrace } from '../store/stored-trace';
import { SseClient } from './helpers/sse';
import { launchChromium, type OutsideRequests, type TestBrowser } from './helpers/browser';
import { deathOf, startWorker, type WorkerProcess } from './helpers/faults';
import { PROJECT_ROOT, tempDir } from './helpers/run-dir';
import { canonicalInput, pendingApproval, startServer, uniqueQueue, waitFor } from './helpers/temporal';

const CONSOLE_TOKEN = 'stream-test-console-token-0123456789';
const BOT = 'bot-token-0123456789-0123456789-0123456789';
const CLI = 'cli-token-0123456789-0123456789-0123456789';

describe('the event stream of a run', () => {
  let env: TestWorkflowEnvironment;
  let app: RunningConsole;
  let browser: TestBrowser;
  let page: Page;
  let outside: OutsideRequests;
  const workers: WorkerProcess[] = [];
  const stateDir = tempDir('stream-state');
  const taskQueue = uniqueQueue('stream');
  let runs = 0;
  let tokens: Map<string, string>;

  /** A console on the test's state folder; `record`: the command line of that folder finds it (the newest recorded wins). */
  const consoleOn = (record = true) =>
    startConsole({
      client: env.client,
      token: CONSOLE_TOKEN,
      host: '127.0.0.1',
      port: 0,
      webUi: null,
      namespace: 'default',
      stateDir,
      apiTokens: tokens,
      recordDir: record ? stateDir : null,
      confirmMs: 30_000,
      keepAliveMs: 1000,
      // Every stream is closed after a few seconds: each client reconnects several times in a run.
      streamMaxMs: 3000,
    });
  const worker = async () => {
    const w = startWorker(env, taskQueue, stateDir);
    workers.push(w);
    await w.ready;
    return w;
  };
  const startRun = () =>
    access.startRun(env.client, canonicalInput('canonical', { approver: 'interactive' }), {
      taskQueue,
      workflowId: `${taskQueue}-run-${++runs}`,
    });
  const stream = (id: string, version: number, token = BOT) =>
    new SseClient(`${app.url}/api/runs/${encodeURIComponent(id)}/events?v=${version}`, { authorization: `Bearer ${token}` });
  const act = async (id: string, body: object, o: { url?: string; headers?: Record<string, string> } = {}) => {
    const res = await fetch(`${o.url ?? app.url}/api/runs/${encodeURIComponent(id)}/actions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(o.headers ?? { authorization: `Bearer ${BOT}` }) },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as Record<string, any> };
  };
  const stored = (runId: string) => {
    const store = openStore(stateDir)!;
    try {
      return storedTrace(store, runId);
    } finally {
      store.close();
    }
  };
  const digests = (p: { action_id: string; args_digest: string; workspace_digest: string }) => ({
    action_id: p.action_id,
    args_digest: p.args_digest,
    workspace_digest: p.workspace_digest,
  });

  beforeAll(async () => {
    env = await startServer();
    writeFileSync(join(stateDir, API_TOKENS_FILE), `bot ${BOT}\ncli ${CLI}\n`, { mode: 0o600 });
    tokens = readApiTokens(join(stateDir, API_TOKENS_FILE));
    app = await consoleOn();
    browser = await launchChromium();
    ({ page, outside } = await browser.newPage());
    await page.goto(app.signInLink());
    await page.fill('#name', 'alice');
    await Promise.all([page.waitForURL(`${app.url}/`), page.click('#sign-in-button')]);
  });

  afterAll(async () => {
    await browser?.close();
    await app?.close();
    for (const w of workers) await w.stop();
    await env?.teardown();
  });

  it('gives an HTTP client and the run page every event once across a cut, a SIGKILLed worker and reconnections; an approval from one shows on the other', async () => {
    const first = await worker();
    const handle = await startRun();
    const id = handle.workflowId;
    const a = stream(id, 2);
    const v1 = stream(id, 1);
    a.connect();
    v1.connect();
    const card1 = await a.waitFor('the first approval card', (f) => f.event === 'card' && f.data.state === 'requested');
    expect(card1.data).toMatchObject({ v: 1, class: 'card', path: 'tests/test_agent_nested.py' });
    expect(card1.id).toBe(String(card1.data.event.seq));

    // The run page, opened on the pending write; its script follows the stream from the events it shows.
    const streamRequests: string[] = [];
    page.on('request', (r) => {
      if (r.url().includes('/events')) streamRequests.push(r.url());
    });
    await page.goto(`${app.url}/runs/${encodeURIComponent(id)}`);
    expect(await page.textContent('#action-id')).toBe(card1.data.action_id);
    await page.waitForSelector('#live-state:text-is("live")');
    expect(await page.$$eval('script', (s) => s.map((x) => x.textContent))).toEqual([LIVE_SCRIPT]);

    // The HTTP client is cut off; the approval it sends shows as resolved on the page.
    a.cut();
    const sent = performance.now();
    const approved = act(id, { id: 'approve-first', action: 'approve', ...digests(card1.data as never) });
    await page.waitForSelector('#card-state[data-state="approved"]', { timeout: 30_000 });
    const shownMs = performance.now() - sent;
    expect((await approved).body).toMatchObject({ outcome: 'approved', seq: expect.any(Number) });
    expect(await page.textContent('#card-state')).toContain('approved by api:bot');
    // A figure, not a bound (the bench measures speed): the page showed it without a reload.
    process.stderr.write(`an approval sent over the API showed as resolved on the run page after ${shownMs.toFixed(0)} ms\n`);

    // The worker dies while the run waits for its second write; the cut client comes back meanwhile.
    const card2 = await v1.waitFor(
      'the second approval card',
      (f) => f.event === 'card' && f.data.state === 'requested' && f.data.action_id !== card1.data.action_id,
    );
    first.child.kill('SIGKILL');
    expect((await deathOf(first)).signal).toBe('SIGKILL');
    a.connect();
    await a.waitFor('a hint that no worker answers', (f) => f.event === 'hint' && f.data.hint === 'no_worker', 30_000);
    await worker();
    // Until the new worker answers for the run, the action is refused and nothing is sent: the client sends it again, under the same id.
    const refusals: string[] = [];
    const second = await waitFor(
      'the second approval to be taken',
      async () => {
        const r = await act(id, { id: 'approve-second', action: 'approve', ...digests(card2.data as never) });
        if (r.status !== 200) refusals.push(`${new Date().toISOString()} ${r.status} ${JSON.stringify(r.body)}`);
        return r.status === 200 ? r : null;
      },
      60_000,
    ).catch((err: Error) => {
      throw new Error(
        `${err.message}; the refusals: ${refusals.slice(-5).join(' | ')}; the worker's last lines: ${workers.at(-1)?.log().slice(-3000)}`,
      );
    });
    expect(second.body.outcome).toBe('approved');
    await Promise.all([a.waitFor('the end', (f) => f.event === 'end', 120_000), v1.waitFor('the end', (f) => f.event === 'end')]);
    await page.waitForSelector('#live-state:text-is("the run ended")', { timeout: 30_000 });

    const outcome = await access.runOutcome(handle);
    expect(outcome.record).toMatchObject({ status: 'completed', writes: 2, receipts: 2 });
    const trace = stored(outcome.trace.run_id);
    expect(trace.map((e) => e.seq)).toEqual(trace.map((_, i) => i + 1));
    expect(trace.at(-1)?.type).toBe('run_finished');
    // Each HTTP client: every event of the trace exactly once, in order, each under its seq.
    for (const client of [a, v1]) {
      expect(client.events()).toEqual(trace);
      for (const f of client.frames) if (f.data.event) expect(f.id).toBe(String(f.data.event.seq));
      expect(client.frames.at(-1)).toMatchObject({ event: 'end', data: { status: 'completed' } });
    }
    expect(a.connections).toBeGreaterThan(2);
    expect(a.comments).toBeGreaterThan(0);
    // The page: the events it was rendered with and those its script added, once each, in order.
    const rows = await page.$$eval('#trace li', (lis) =>
      lis.map((li) => [Number(li.getAttribute('data-seq')), li.getAttribute('data-type')]),
    );
    expect(rows).toEqual(trace.map((e) => [e.seq, e.type]));
    expect(streamRequests.length).toBeGreaterThan(1);
    expect(await page.textContent('#status')).toBe('completed');

    // Versions: the client of version 1 got no frame of a later version; the other got some.
    expect(v1.frames.filter((f) => f.data.v !== 1 || !['trace', 'card', 'run', 'end'].includes(f.event))).toEqual([]);
    expect(a.frames.filter((f) => f.data.v === 2).map((f) => f.event)).toContain('hint');
    // Entity snapshots grow in version on each client.
    for (const client of [a, v1]) {
      const versions = client.frames.filter((f) => f.event === 'run').map((f) => f.data.version as number);
      expect(versions).toEqual([...versions].sort((x, y) => x - y));
    }
    expect(outside.aborted).toEqual([]);
  });

  it('takes an action once however often it is sent, through a second console too; the list of pending approvals shows it resolved; status --follow reads the same stream', async () => {
    const handle = await startRun();
    const id = handle.workflowId;
    const p1 = await pendingApproval(handle);
    const follow = spawn(process.execPath, [join(PROJECT_ROOT, 'dist', 'client', 'cli.js'), 'status', '--follow', id], {
      env: { ...process.env, TEMPORAL_ADDRESS: env.address, AGENT_STATE_DIR: stateDir, AGENT_TASK_QUEUE: taskQueue },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    follow.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    follow.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const exited = new Promise<number | null>((resolve) => follow.once('exit', (code) => resolve(code)));
    await waitFor(
      'status --follow to follow through the console',
      async () => stdout.includes('(following through the console at'),
      30_000,
    );

    const steer = { id: 'steer-1', action: 'steer', message: 'keep the fix small' };
    const [s1, s2] = await Promise.all([act(id, steer), act(id, steer)]);
    const s3 = await act(id, steer);
    expect(s1).toEqual({ status: 200, body: { id: 'steer-1', action: 'steer', outcome: 'sent', detail: null, seq: null } });
    expect([s2, s3]).toEqual([s1, s1]);
    // A console that never saw the first request sends it again, under the same message id: the run takes it once.
    const other = await consoleOn(false);
    try {
      expect((await act(id, steer, { url: other.url })).body.outcome).toBe('sent');
    } finally {
      await other.close();
    }
    // The list of pending approvals follows the run's stream too: the row shows the approval another client sends.
    const row = `#pending tr[data-action="${p1.action_id}"]`;
    await waitFor(
      'the run on the list of pending approvals',
      async () => {
        await page.goto(`${app.url}/`);
        return (await page.locator(row).count()) === 1;
      },
      30_000,
    );
    // The list reloads itself every 5 s: the approval goes out right after a load, and its row must show it before the next.
    const approve = { id: 'approve-1', action: 'approve', ...digests(p1) };
    const onList = page.waitForSelector(`${row}[data-state="approved"]`, { timeout: 4500 });
    const [a1, a2] = await Promise.all([act(id, approve), act(id, approve)]);
    await onList;
    expect(await page.textContent(`${row} .resolution`)).toBe('approved by api:bot');
    expect(a1.body).toMatchObject({ outcome: 'approved', seq: expect.any(Number) });
    expect(a2).toEqual(a1);
    expect(await act(id, { ...approve, action: 'reject' })).toEqual({
      status: 409,
      body: { error: 'the id approve-1 was used for another request on this run; choose a new id' },
    });

    // Stop from a client: a run of its own is cancelled, once.
    await pendingApproval(handle, p1.action_id);
    const stop = { id: 'stop-1', action: 'stop', reason: 'enough for today' };
    const [x1, x2] = await Promise.all([act(id, stop), act(id, stop)]);
    expect([x1.body.outcome, x2]).toEqual(['sent', x1]);
    const outcome = await access.runOutcome(handle);
    expect(outcome.record).toMatchObject({ status: 'cancelled', reason: 'cancelled', writes: 1 });
    const trace = stored(outcome.trace.run_id);
    expect(trace.filter((e) => e.type === 'steer_received').map((e) => e.data)).toEqual([{ message: 'keep the fix small' }]);
    expect(trace.filter((e) => e.type === 'approval_recorded').map((e) => e.action_id)).toEqual([p1.action_id]);

    expect(await exited).toBe(1);
    const shown = stdout.split('\n').filter((l) => /^#\d+ /.test(l));
    const from = Number(shown[0].slice(1).split(' ')[0]);
    expect(shown.map((l) => Number(l.slice(1).split(' ')[0]))).toEqual(trace.filter((e) => e.seq >= from).map((e) => e.seq));
    expect(stdout.trimEnd().split('\n').at(-1)).toBe('cancelled (cancelled)');
    expect(stderr).not.toContain('following the run directly');
    expect(outside.aborted).toEqual([]);
  });

  it('run --follow prints each event once through the console and asks for each write at the terminal from the run frames', async () => {
    const child = spawn(
      process.execPath,
      [
        join(PROJECT_ROOT, 'dist', 'client', 'cli.js'),
        'run',
        'fixtures/linkcheck-nested',
        '--replay',
        'fixtures/linkcheck-nested/replays/canonical.json',
        '--follow',
        '--id',
        `${taskQueue}-followed`,
      ],
      {
        cwd: PROJECT_ROOT,
        env: { ...process.env, TEMPORAL_ADDRESS: env.address, AGENT_STATE_DIR: stateDir, AGENT_TASK_QUEUE: taskQueue },
      },
    );
    let output = '';
    let stdout = '';
    let answered = 0;
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      for (const asked = output.split('Approve this write? [y/N]').length - 1; answered < asked; answered++) child.stdin.write('y\n');
    };
    // The prompt goes to stderr without a newline: events are read from stdout alone.
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
      onData(chunk);
    });
    child.stderr.on('data', onData);
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    expect([code, answered]).toEqual([0, 2]);
    expect(output).toContain(`(following through the console at ${app.url})`);
    expect(output).not.toContain('reading the run directly');
    const outcome = await access.runOutcome(access.runHandle(env.client, `${taskQueue}-followed`));
    expect(outcome.record).toMatchObject({ status: 'completed', writes: 2, receipts: 2 });
    const shown = stdout.split('\n').filter((l) => /^#\d+ /.test(l));
    expect(shown.map((l) => Number(l.slice(1).split(' ')[0]))).toEqual(stored(outcome.trace.run_id).map((e) => e.seq));
  });

  it('refuses what the contract does not allow, and replays a closed run from the store', async () => {
    const id = `${taskQueue}-run-2`;
    const events = (query = '', headers: Record<string, string> = { authorization: `Bearer ${BOT}` }) =>
      fetch(`${app.url}/api/runs/${encodeURIComponent(id)}/events${query}`, { headers });
    const statusOf = async (res: Promise<Response>) => {
      const r = await res;
      await r.body?.cancel();
      return r.status;
    };
    expect(await statusOf(events('', {}))).toBe(401);
    expect(await statusOf(events('', { authorization: 'Bearer not-a-token-of-this-console-at-all' }))).toBe(401);
    expect(await statusOf(events(`?token=${BOT}`, {}))).toBe(400);
    expect(await statusOf(events('?v=0'))).toBe(400);
    expect(await statusOf(events('?v=1', { authorization: `Bearer ${BOT}`, 'frame-version': '2' }))).toBe(400);
    expect(await statusOf(events('', { authorization: `Bearer ${BOT}`, 'last-event-id': '12x' }))).toBe(400);
    expect(await statusOf(fetch(`${app.url}/api/runs/no-such-run/events`, { headers: { authorization: `Bearer ${BOT}` } }))).toBe(404);

    // A signed-in browser's session: CSRF for actions; a closed run takes none.
    const res = await fetch(`${app.url}/login`, {
      method: 'POST',
      body: new URLSearchParams({ token: CONSOLE_TOKEN, name: 'carol' }),
      redirect: 'manual',
    });
    const cookie = res.headers.get('set-cookie')!.split(';')[0];
    const card = await (await fetch(`${app.url}/runs/${encodeURIComponent(id)}`, { headers: { cookie } })).text();
    const csrf = /name="csrf" value="([^"]+)"/.exec(card)![1];
    const steer = { id: 'late', action: 'steer', message: 'too late' };
    expect((await act(id, steer, { headers: { cookie } })).status).toBe(403);
    expect(await act(id, steer, { headers: { cookie, 'x-csrf-token': csrf } })).toEqual({
      status: 409,
      body: { error: `run ${id} is not running; nothing was sent` },
    });
    expect((await act(id, { id: 'bad', action: 'approve' })).status).toBe(400);

    // A closed run: its whole trace from the store, its final state, its end; then nothing twice.
    const handle = access.runHandle(env.client, id);
    const outcome = await access.runOutcome(handle);
    const closed = stream(id, 1);
    closed.connect();
    await closed.waitFor('the end', (f) => f.event === 'end');
    expect(closed.events()).toEqual(stored(outcome.trace.run_id));
    expect(closed.frames.slice(-2).map((f) => f.event)).toEqual(['run', 'end']);
    const again = new SseClient(`${app.url}/api/runs/${encodeURIComponent(id)}/events?v=1&after=${closed.lastId}`, {
      authorization: `Bearer ${BOT}`,
    });
    again.connect();
    await again.waitFor('the end', (f) => f.event === 'end');
    expect(again.frames.map((f) => f.event)).toEqual(['run', 'end']);
  });
});
