/**
 * The approval console against a real dev server and worker, in a real headless Chromium:
 * the canonical interactive run approved and then rejected from its card, a stale card refused
 * and replaced, two waiting runs approved independently; and the security rules over plain HTTP:
 * no token, a wrong CSRF token or a forged digest change nothing.
 */
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import type { WorkflowHandleWithFirstExecutionRunId as WorkflowHandle } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { Browser, Page } from 'playwright-core';
import { startConsole, type RunningConsole } from '../client/console/server';
import type { RunView } from '../core/run-view';
import type { TraceEvent } from '../core/trace';
import type { HostWorkers } from '../worker';
import { launchChromium, testOutput } from './helpers/browser';
import { LINKCHECK, PROJECT_ROOT, tempDir } from './helpers/run-dir';
import { approveAll, canonicalInput, inProcessWorker, pendingApproval, startServer, traceIn, traceOf, uniqueQueue, waitFor } from './helpers/temporal';

const TOKEN = 'console-test-token-0123456789';
const task = (): string => require(join(LINKCHECK, 'fixture.json')).task;

describe('the approval console', () => {
  let env: TestWorkflowEnvironment;
  let worker: HostWorkers;
  let running: Promise<void>;
  let closeWorker: () => void;
  let ledgerReceipts: (runId: string) => unknown[];
  let app: RunningConsole;
  let browser: Browser;
  let page: Page;
  const stateDir = tempDir('console-state');
  const taskQueue = uniqueQueue('console');
  let runs = 0;

  beforeAll(async () => {
    env = await startServer();
    const w = await inProcessWorker(env, taskQueue, stateDir);
    worker = w.worker;
    closeWorker = w.close;
    ledgerReceipts = (runId) => w.ledger.receipts(runId);
    running = worker.run();
    app = await startConsole({ client: env.client, token: TOKEN, host: '127.0.0.1', port: 0, webUi: 'http://localhost:8233', namespace: 'default', confirmMs: 20_000 });
    browser = await launchChromium();
    page = await browser.newPage();
  });

  afterAll(async () => {
    await browser?.close();
    await app?.close();
    worker?.shutdown();
    await running;
    closeWorker?.();
    await env?.teardown();
  });

  const startRun = (): Promise<WorkflowHandle> =>
    env.client.workflow.start('agentRun', { taskQueue, workflowId: `${taskQueue}-run-${++runs}`, args: [canonicalInput('canonical', { approver: 'interactive' })] });
  const text = async (selector: string) => (await page.textContent(selector))?.trim();
  /** The list, reloaded until it shows every one of these runs as pending (visibility lags a little). */
  const listShows = (ids: string[]) =>
    waitFor('the list to show the pending runs', async () => {
      await page.goto(`${app.url}/`);
      const shown = await page.locator('#pending tr.pending a').allTextContents();
      return ids.every((id) => shown.includes(id));
    }, 30_000);
  const cardShows = (id: string, path: string) =>
    waitFor(`the card of ${id} to show ${path}`, async () => {
      const card = `${app.url}/runs/${encodeURIComponent(id)}`;
      if (page.url().split('?')[0] !== card) await page.goto(card);
      else await page.reload();
      return (await page.locator('#path').count()) > 0 && (await text('#path')) === path;
    }, 30_000);
  const approvals = (trace: TraceEvent[]) =>
    trace.filter((e) => e.type === 'approval_recorded').map((e) => ({ action_id: e.action_id, ...(e.data as { decision: string; principal: string; reason: string | null }) }));

  it('signs in with the token, lists the waiting run, shows its card, approves the first write and rejects the second', async () => {
    const handle = await startRun();
    const first = await pendingApproval(handle);
    await page.goto(`${app.url}/login?token=${TOKEN}`);
    await page.fill('#name', 'alice');
    await Promise.all([page.waitForURL(`${app.url}/`), page.click('button[type=submit]')]);
    await listShows([handle.workflowId]);
    expect(await text('#pending tr.pending td:nth-child(3)')).toBe('tests/test_agent_nested.py');
    await page.screenshot({ path: testOutput('console-list.png'), fullPage: true });

    await Promise.all([page.waitForURL(/\/runs\//), page.click(`#pending a:text-is("${handle.workflowId}")`)]);
    expect(await text('#path')).toBe(first.path);
    expect(await text('#action-id')).toBe(first.action_id);
    expect(await text('#before')).toBe('absent');
    expect(await text('#after')).toBe(first.after);
    expect(await text('#args-digest')).toBe(first.args_digest);
    expect(await text('#workspace-digest')).toBe(first.workspace_digest);
    expect(await text('#task')).toBe(task());
    expect(await text('#plan')).toMatch(/^Read the checker/);
    expect(await text('#rules')).toContain('allowed-new-file');
    expect(await page.locator('#diff span.add').count()).toBeGreaterThan(3);
    expect(await page.locator('#diff span.del').count()).toBe(0);
    expect(await page.getAttribute('#web-ui', 'href')).toBe(`http://localhost:8233/namespaces/default/workflows/${encodeURIComponent(handle.workflowId)}`);
    expect(await page.locator('#trace li').count()).toBeGreaterThan(3);
    expect(await text('#principal')).toBe('console:alice');
    await page.screenshot({ path: testOutput('console-card.png'), fullPage: true });

    await Promise.all([page.waitForURL(/notice=approved/), page.click('#approve')]);
    const second = await pendingApproval(handle, first.action_id);
    await cardShows(handle.workflowId, 'src/linkcheck.py');
    expect(await text('#action-id')).toBe(second.action_id);
    expect(await page.locator('#diff span.del').count()).toBeGreaterThan(0);
    await page.fill('#reason', 'resolve the link from the document folder in one place');
    await Promise.all([page.waitForURL(/notice=rejected/), page.click('#reject')]);
    expect(await page.getAttribute('#notice', 'data-notice')).toBe('rejected');

    await handle.result();
    const trace = traceIn(stateDir, handle.firstExecutionRunId);
    expect(approvals(trace)).toEqual([
      expect.objectContaining({ action_id: first.action_id, decision: 'approve', principal: 'console:alice', args_digest: first.args_digest, workspace_digest: first.workspace_digest }),
      expect.objectContaining({ action_id: second.action_id, decision: 'reject', principal: 'console:alice', reason: 'resolve the link from the document folder in one place' }),
    ]);
    const rejected = trace.find((e) => e.type === 'tool_observed' && e.call_id === second.call_id);
    expect((rejected?.data as { error?: string }).error).toBe('approval_rejected');
    expect(ledgerReceipts(handle.firstExecutionRunId)).toHaveLength(1);

    // The list shows it among the recently finished runs, with its status and reason.
    const row = await waitFor('the list to show the finished run', async () => {
      await page.goto(`${app.url}/`);
      const cells = await page.locator(`#finished tr.finished:has(a:text-is("${handle.workflowId}")) td`).allTextContents();
      return cells.length > 0 ? cells : null;
    }, 30_000);
    expect(row.slice(1, 4)).toEqual(['linkcheck-nested', 'failed', 'verification_failed']);
  });

  it('refuses an approval from a card that went stale and shows the current card', async () => {
    const handle = await startRun();
    const first = await pendingApproval(handle);
    await cardShows(handle.workflowId, 'tests/test_agent_nested.py');
    // Someone else approves the shown action first; the run moves on to its next write.
    await handle.signal('approval', { action_id: first.action_id, decision: 'approve', args_digest: first.args_digest, workspace_digest: first.workspace_digest, principal: 'user:bob' });
    const second = await pendingApproval(handle, first.action_id);
    await Promise.all([page.waitForURL(/notice=stale/), page.click('#approve')]);
    expect(await text('#notice')).toMatch(/^Not applied/);
    expect(await text('#path')).toBe('src/linkcheck.py');
    expect(await text('#action-id')).toBe(second.action_id);
    await page.screenshot({ path: testOutput('console-stale.png'), fullPage: true });
    const ignored = (await traceOf(handle)).filter((e) => e.type === 'approval_ignored');
    expect(ignored.map((e) => e.action_id)).toEqual([first.action_id]);
    expect(approvals(await traceOf(handle)).map((a) => a.principal)).toEqual(['user:bob']);
    await approveAll(handle);
    expect((await handle.result()).record.status).toBe('completed');
  });

  it('lists two waiting runs and approves each on its own', async () => {
    const [a, b] = await Promise.all([startRun(), startRun()]);
    const [pa, pb] = await Promise.all([pendingApproval(a), pendingApproval(b)]);
    await listShows([a.workflowId, b.workflowId]);
    expect(await page.locator('#pending tr.pending').count()).toBeGreaterThanOrEqual(2);

    await cardShows(a.workflowId, 'tests/test_agent_nested.py');
    await Promise.all([page.waitForURL(/notice=approved/), page.click('#approve')]);
    expect(approvals(await traceOf(a)).map((x) => [x.action_id, x.principal])).toEqual([[pa.action_id, 'console:alice']]);
    const stillB = await b.query<RunView>('state');
    expect([stillB.status, stillB.pending_approval?.action_id, approvals(await traceOf(b))]).toEqual(['awaiting_approval', pb.action_id, []]);

    await page.goto(`${app.url}/runs/${encodeURIComponent(b.workflowId)}`);
    expect(await text('#action-id')).toBe(pb.action_id);
    await Promise.all([page.waitForURL(/notice=approved/), page.click('#approve')]);
    expect(approvals(await traceOf(b)).map((x) => [x.action_id, x.principal])).toEqual([[pb.action_id, 'console:alice']]);
    await Promise.all([approveAll(a), approveAll(b)]);
  });

  describe('security', () => {
    let handle: WorkflowHandle;
    let pending: Awaited<ReturnType<typeof pendingApproval>>;
    let cookie: string;
    let csrf: string;

    beforeAll(async () => {
      handle = await startRun();
      pending = await pendingApproval(handle);
      const login = await fetch(`${app.url}/login`, { method: 'POST', body: new URLSearchParams({ token: TOKEN, name: 'mallory-test' }), redirect: 'manual' });
      expect(login.status).toBe(303);
      cookie = login.headers.get('set-cookie')!.split(';')[0];
      const card = await (await fetch(`${app.url}/runs/${encodeURIComponent(handle.workflowId)}`, { headers: { cookie } })).text();
      csrf = /name="csrf" value="([^"]+)"/.exec(card)![1];
    });

    const form = (fields: Record<string, string>) => ({ action_id: pending.action_id, args_digest: pending.args_digest, workspace_digest: pending.workspace_digest, decision: 'approve', csrf, ...fields });
    const post = (fields: Record<string, string>, headers: Record<string, string> = { cookie }) =>
      fetch(`${app.url}/runs/${encodeURIComponent(handle.workflowId)}/approval`, { method: 'POST', body: new URLSearchParams(fields), headers, redirect: 'manual' });
    /** The run is exactly as it was: the same action pending, no approval recorded, nothing written. */
    async function unchanged(ignored = 0) {
      const view = await handle.query<RunView>('state');
      const trace = await traceOf(handle);
      expect({
        status: view.status,
        pending: view.pending_approval?.action_id,
        recorded: trace.filter((e) => e.type === 'approval_recorded').length,
        ignored: trace.filter((e) => e.type === 'approval_ignored').length,
        receipts: ledgerReceipts(handle.firstExecutionRunId).length,
      }).toEqual({ status: 'awaiting_approval', pending: pending.action_id, recorded: 0, ignored, receipts: 0 });
    }

    it('answers nothing without a session made from the token', async () => {
      for (const path of ['/', `/runs/${encodeURIComponent(handle.workflowId)}`]) {
        const res = await fetch(`${app.url}${path}`);
        expect(res.status).toBe(401);
        expect(await res.text()).not.toContain(pending.action_id);
      }
      expect((await fetch(`${app.url}/`, { headers: { cookie: 'agent_console=forged-session' } })).status).toBe(401);
      expect((await fetch(`${app.url}/login?token=wrong-token-0123456789`)).status).toBe(401);
      const wrong = await fetch(`${app.url}/login`, { method: 'POST', body: new URLSearchParams({ token: 'wrong-token-0123456789', name: 'eve' }), redirect: 'manual' });
      expect([wrong.status, wrong.headers.get('set-cookie')]).toEqual([401, null]);
      expect((await post(form({}), {})).status).toBe(401);
      await unchanged();
    });

    it('refuses a state change without the session CSRF token, or by GET', async () => {
      expect((await post(form({ csrf: 'not-the-token' }))).status).toBe(403);
      const { csrf: _omit, ...withoutCsrf } = form({});
      expect((await post(withoutCsrf)).status).toBe(403);
      expect((await fetch(`${app.url}/runs/${encodeURIComponent(handle.workflowId)}/approval?${new URLSearchParams(form({}))}`, { headers: { cookie } })).status).toBe(404);
      expect((await post(form({ decision: 'approve-all' }))).status).toBe(400);
      await unchanged();
    });

    it('sends a forged digest, which the run ignores: nothing is approved or written', async () => {
      const flipped = (pending.args_digest[0] === '0' ? '1' : '0') + pending.args_digest.slice(1);
      const res = await post(form({ args_digest: flipped }));
      expect([res.status, res.headers.get('location')]).toEqual([303, `/runs/${encodeURIComponent(handle.workflowId)}?notice=stale`]);
      await unchanged(1);
      const ignored = (await traceOf(handle)).find((e) => e.type === 'approval_ignored');
      expect(ignored).toMatchObject({ action_id: pending.action_id, data: { reason: 'digests do not match the pending action' } });
    });

    it('answers only to loopback host names (no DNS rebinding)', async () => {
      const asHost = (host: string) =>
        new Promise<number>((resolve, reject) => {
          const req = request(`${app.url}/`, { headers: { host, cookie } }, (res) => {
            res.resume();
            resolve(res.statusCode!);
          });
          req.on('error', reject);
          req.end();
        });
      const port = new URL(app.url).port;
      expect(await asHost(`attacker.example:${port}`)).toBe(421);
      expect(await asHost(`localhost:${port}`)).toBe(200);
    });

    it('sets no-script, no-frame headers on every page', async () => {
      const res = await fetch(`${app.url}/`, { headers: { cookie } });
      expect(res.headers.get('content-security-policy')).toContain("default-src 'none'");
      expect(res.headers.get('x-frame-options')).toBe('DENY');
      expect(res.headers.get('referrer-policy')).toBe('no-referrer');
    });

    it('binds to loopback unless --host is given, and warns for another address', async () => {
      /** The console command line; `probe` runs against it once it serves, then it is stopped. */
      const start = (args: string[], probe: (url: string) => Promise<void> = async () => undefined) =>
        new Promise<{ stdout: string; stderr: string; code: number | null }>((resolve, reject) => {
          const child = spawn(process.execPath, [join(PROJECT_ROOT, 'dist', 'client', 'cli.js'), 'console', '--port', '0', ...args], {
            env: { ...process.env, TEMPORAL_ADDRESS: env.address, AGENT_STATE_DIR: stateDir },
            cwd: PROJECT_ROOT,
          });
          let stdout = '';
          let stderr = '';
          let probed: Promise<void> = Promise.resolve();
          child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
          child.stdout.on('data', (c: Buffer) => {
            stdout += c.toString();
            const url = /^console on (\S+);/.exec(stdout)?.[1];
            if (url && stdout.includes('sign in at')) probed = probe(url).finally(() => child.kill('SIGTERM'));
          });
          child.once('exit', (code) => void probed.then(() => resolve({ stdout, stderr, code }), reject));
          child.once('error', reject);
        });
      const local = await start([]);
      expect(local.stdout).toMatch(/^console on http:\/\/127\.0\.0\.1:\d+; sign in at http:\/\/127\.0\.0\.1:\d+\/login\?token=[\w-]{32}\n$/);
      expect(local.stderr).not.toContain('warning');
      const open = await start(['--host', '0.0.0.0']);
      expect(open.stdout).toMatch(/^console on http:\/\/0\.0\.0\.0:\d+;/);
      expect(open.stderr).toContain('warning: serving the console on 0.0.0.0, not a loopback address');

      // A token from a file: printed nowhere, and it signs in.
      const file = join(tempDir('console-token'), 'token');
      writeFileSync(file, `${TOKEN}\n`);
      let status = 0;
      const fromFile = await start(['--token-file', file], async (url) => {
        status = (await fetch(`${url}/login?token=${TOKEN}`)).status;
      });
      expect([status, fromFile.stdout.includes(TOKEN)]).toEqual([200, false]);
      writeFileSync(file, 'short\n');
      const short = await start(['--token-file', file]);
      expect([short.code, short.stderr]).toEqual([2, expect.stringContaining('at least 16 characters')]);
    });

    it('answers 404 for an unknown run and refuses to approve a closed one', async () => {
      expect((await fetch(`${app.url}/runs/no-such-run`, { headers: { cookie } })).status).toBe(404);
      await handle.terminate('closing the run under test');
      const card = await fetch(`${app.url}/runs/${encodeURIComponent(handle.workflowId)}`, { headers: { cookie } });
      expect([card.status, await card.text()]).toEqual([503, expect.stringContaining('Run not readable')]);
      expect((await post(form({}))).status).toBe(409);
    });

    afterAll(async () => {
      await handle?.terminate('security tests done').catch(() => undefined);
    });
  });
});
