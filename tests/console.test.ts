/**
 * The approval console against a real dev server and worker, in a real headless Chromium:
 * the canonical interactive run approved and then rejected from its card, a stale card refused
 * and replaced, two waiting runs approved independently, a write whose diff was cut for display
 * approved only after its whole diff was opened; sign-in by a one-time link or the typed token
 * (never a token in a URL), idle and absolute expiry on an injected clock, sign-out and the
 * bounded session table; and the security rules over plain HTTP: no session, a wrong CSRF token or
 * a forged digest change nothing, off loopback only behind the operator's https address.
 */
import { createHash } from 'node:crypto';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import type { WorkflowHandleWithFirstExecutionRunId as WorkflowHandle } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { Page } from 'playwright-core';
import { CODE_TTL_MS, MAX_SESSIONS, SESSION_IDLE_MS, SESSION_MAX_MS, startConsole, type RunningConsole } from '../client/console/server';
import { canonicalJson } from '../core/canonical';
import type { TraceEvent } from '../core/trace';
import type { HostWorkers } from '../worker';
import { launchChromium, staysLocal, testOutput, type OutsideRequests, type TestBrowser } from './helpers/browser';
import { commentLines, creationDiff, grownCanonical } from './helpers/large-diff';
import { LINKCHECK, PROJECT_ROOT, tempDir } from './helpers/run-dir';
import {
  approveAll,
  canonicalInput,
  inProcessWorker,
  pendingApproval,
  startServer,
  traceIn,
  traceOf,
  uniqueQueue,
  waitFor,
} from './helpers/temporal';
import * as access from '../client/run-access';
import { queryState, sendApproval } from '../client/run-access';

const TOKEN = 'console-test-token-0123456789';
const task = (): string => require(join(LINKCHECK, 'fixture.json')).task;

/** POST /login with these fields: the status and the session cookie it set, if any. */
async function signIn(url: string, fields: Record<string, string>): Promise<{ status: number; cookie: string | null }> {
  const res = await fetch(`${url}/login`, { method: 'POST', body: new URLSearchParams(fields), redirect: 'manual' });
  const set = res.headers.get('set-cookie');
  return { status: res.status, cookie: set && !/Max-Age=0/.test(set) ? set.split(';')[0] : null };
}
const codeOf = (link: string) => new URL(link).searchParams.get('code')!;

/** A request naming `host` in its Host header (fetch cannot): its status, the cookie it set, its body. */
function requestAs(
  url: string,
  host: string,
  o: { method?: string; form?: Record<string, string>; cookie?: string } = {},
): Promise<{ status: number; setCookie: string | null; body: string }> {
  const body = o.form ? new URLSearchParams(o.form).toString() : undefined;
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method: o.method ?? 'GET',
        headers: {
          host,
          ...(o.cookie ? { cookie: o.cookie } : {}),
          ...(body ? { 'content-type': 'application/x-www-form-urlencoded', 'content-length': Buffer.byteLength(body) } : {}),
        },
      },
      (res) => {
        let text = '';
        res.on('data', (c: Buffer) => (text += c.toString()));
        res.on('end', () => resolve({ status: res.statusCode!, setCookie: res.headers['set-cookie']?.[0] ?? null, body: text }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

describe('the approval console', () => {
  let env: TestWorkflowEnvironment;
  let worker: HostWorkers;
  let running: Promise<void>;
  let closeWorker: () => void;
  let ledgerReceipts: (runId: string) => unknown[];
  let app: RunningConsole;
  let browser: TestBrowser;
  let page: Page;
  /** What the shared page tried to fetch beyond this machine (aborted); each test expects nothing. */
  let outside: OutsideRequests;
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
    app = await startConsole({
      client: env.client,
      token: TOKEN,
      host: '127.0.0.1',
      port: 0,
      webUi: 'http://localhost:8233',
      namespace: 'default',
      confirmMs: 20_000,
      stateDir,
    });
    browser = await launchChromium();
    ({ page, outside } = await browser.newPage());
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
    access.startRun(env.client, canonicalInput('canonical', { approver: 'interactive' }), {
      taskQueue,
      workflowId: `${taskQueue}-run-${++runs}`,
    });
  const text = async (selector: string) => (await page.textContent(selector))?.trim();
  /** The list, reloaded until it shows every one of these runs as pending (visibility lags a little). */
  const listShows = (ids: string[]) =>
    waitFor(
      'the list to show the pending runs',
      async () => {
        await page.goto(`${app.url}/`);
        const shown = await page.locator('#pending tr.pending a').allTextContents();
        return ids.every((id) => shown.includes(id));
      },
      30_000,
    );
  const cardShows = (id: string, path: string) =>
    waitFor(
      `the card of ${id} to show ${path}`,
      async () => {
        const card = `${app.url}/runs/${encodeURIComponent(id)}`;
        if (page.url().split('?')[0] !== card) await page.goto(card);
        else await page.reload();
        return (await page.locator('#path').count()) > 0 && (await text('#path')) === path;
      },
      30_000,
    );
  const approvals = (trace: TraceEvent[]) =>
    trace
      .filter((e) => e.type === 'approval_recorded')
      .map((e) => ({ action_id: e.action_id, ...(e.data as { decision: string; principal: string; reason: string | null }) }));

  it('signs in with a one-time link, lists the waiting run, shows its card, approves the first write and rejects the second', async () => {
    const handle = await startRun();
    const first = await pendingApproval(handle);
    const link = app.signInLink();
    expect(link).toMatch(new RegExp(`^${app.url}/login\\?code=[\\w-]{43}$`));
    await page.goto(link);
    expect(await page.getAttribute('input[name=code]', 'value')).toBe(codeOf(link));
    await page.fill('#name', 'alice');
    await Promise.all([page.waitForURL(`${app.url}/`), page.click('#sign-in-button')]);
    // The link is used up: a second visit is refused and offers the token form instead.
    expect((await fetch(link)).status).toBe(401);
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
    expect(await page.getAttribute('#web-ui', 'href')).toBe(
      `http://localhost:8233/namespaces/default/workflows/${encodeURIComponent(handle.workflowId)}`,
    );
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
      expect.objectContaining({
        action_id: first.action_id,
        decision: 'approve',
        principal: 'console:alice',
        args_digest: first.args_digest,
        workspace_digest: first.workspace_digest,
      }),
      expect.objectContaining({
        action_id: second.action_id,
        decision: 'reject',
        principal: 'console:alice',
        reason: 'resolve the link from the document folder in one place',
      }),
    ]);
    const rejected = trace.find((e) => e.type === 'tool_observed' && e.call_id === second.call_id);
    expect((rejected?.data as { error?: string }).error).toBe('approval_rejected');
    expect(ledgerReceipts(handle.firstExecutionRunId)).toHaveLength(1);

    // The list shows it among the recently finished runs, with its status and reason.
    const row = await waitFor(
      'the list to show the finished run',
      async () => {
        await page.goto(`${app.url}/`);
        const cells = await page.locator(`#finished tr.finished:has(a:text-is("${handle.workflowId}")) td`).allTextContents();
        return cells.length > 0 ? cells : null;
      },
      30_000,
    );
    expect(row.slice(1, 4)).toEqual(['linkcheck-nested', 'failed', 'verification_failed']);
    expect(outside.aborted).toEqual([]);
  });

  it('refuses an approval from a card that went stale and shows the current card', async () => {
    const handle = await startRun();
    const first = await pendingApproval(handle);
    await cardShows(handle.workflowId, 'tests/test_agent_nested.py');
    // Someone else approves the shown action first; the run moves on to its next write.
    await sendApproval(handle, {
      action_id: first.action_id,
      decision: 'approve',
      args_digest: first.args_digest,
      workspace_digest: first.workspace_digest,
      principal: 'user:bob',
    });
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
    expect(outside.aborted).toEqual([]);
  });

  it('lists two waiting runs and approves each on its own', async () => {
    const [a, b] = await Promise.all([startRun(), startRun()]);
    const [pa, pb] = await Promise.all([pendingApproval(a), pendingApproval(b)]);
    await listShows([a.workflowId, b.workflowId]);
    expect(await page.locator('#pending tr.pending').count()).toBeGreaterThanOrEqual(2);

    await cardShows(a.workflowId, 'tests/test_agent_nested.py');
    await Promise.all([page.waitForURL(/notice=approved/), page.click('#approve')]);
    expect(approvals(await traceOf(a)).map((x) => [x.action_id, x.principal])).toEqual([[pa.action_id, 'console:alice']]);
    const stillB = await queryState(b);
    expect([stillB.status, stillB.pending_approval?.action_id, approvals(await traceOf(b))]).toEqual([
      'awaiting_approval',
      pb.action_id,
      [],
    ]);

    await page.goto(`${app.url}/runs/${encodeURIComponent(b.workflowId)}`);
    expect(await text('#action-id')).toBe(pb.action_id);
    await Promise.all([page.waitForURL(/notice=approved/), page.click('#approve')]);
    expect(approvals(await traceOf(b)).map((x) => [x.action_id, x.principal])).toEqual([[pb.action_id, 'console:alice']]);
    await Promise.all([approveAll(a), approveAll(b)]);
    expect(outside.aborted).toEqual([]);
  });

  it('keeps Approve of a write whose diff was cut locked until this session opens the whole diff; Reject works at once', async () => {
    // The new test file grows to about 120 KB of comments, and a second large file is proposed after it.
    const { path: replay, test } = grownCanonical((t) => t + commentLines('filler', 1500), {
      'tests/test_agent_extra.py': commentLines('extra', 1500),
    });
    const handle = await access.startRun(
      env.client,
      canonicalInput('canonical', { approver: 'interactive', source: { kind: 'replay', path: replay, trusted: true } }),
      { taskQueue, workflowId: `${taskQueue}-run-${++runs}` },
    );
    const big = await pendingApproval(handle);
    const whole = creationDiff('tests/test_agent_nested.py', test);
    expect([big.path, big.diff_truncated, Buffer.byteLength(big.diff) <= 32 * 1024, whole.startsWith(big.diff)]).toEqual([
      'tests/test_agent_nested.py',
      true,
      true,
      true,
    ]);
    expect(Buffer.byteLength(whole)).toBeGreaterThan(3 * 32 * 1024);
    // History names the whole diff by its digest; the text is in the host store only.
    expect(big.diff_ref).toBe(createHash('sha256').update(canonicalJson(whole)).digest('hex'));
    const card = `${app.url}/runs/${encodeURIComponent(handle.workflowId)}`;
    const nothingRecorded = async () => {
      const trace = await traceOf(handle);
      expect({
        pending: (await queryState(handle)).pending_approval?.action_id,
        answers: trace.filter((e) => e.type === 'approval_recorded' || e.type === 'approval_ignored').length,
      }).toEqual({ pending: big.action_id, answers: 0 });
    };

    await cardShows(handle.workflowId, big.path);
    expect([await page.isDisabled('#approve'), await page.isEnabled('#reject')]).toEqual([true, true]);
    expect(await text('#diff-cut')).toMatch(/^The diff above is cut for display\. Open the whole diff/);
    await page.locator('#diff-cut').scrollIntoViewIfNeeded();
    await page.screenshot({ path: testOutput('console-diff-cut.png') });
    // Enabled by hand (as from the developer tools), the button's POST is refused by the server.
    await page.$eval('#approve', (b) => b.removeAttribute('disabled'));
    const [refused] = await Promise.all([page.waitForResponse((r) => r.url().endsWith('/approval')), page.click('#approve')]);
    expect(refused.status()).toBe(403);
    expect(await text('#message')).toMatch(
      /^The diff of tests\/test_agent_nested\.py was cut for display, and this session has not opened it whole/,
    );
    await nothingRecorded();

    // The whole diff of another action (a forged digest) is not shown and unlocks nothing.
    await page.goto(card);
    const link = (await page.getAttribute('#whole-diff', 'href'))!;
    const forged = link.replace(big.args_digest, (big.args_digest[0] === '0' ? '1' : '0') + big.args_digest.slice(1));
    expect((await page.goto(`${app.url}${forged}`))?.status()).toBe(409);
    await page.goto(card);
    expect(await page.isDisabled('#approve')).toBe(true);

    // The whole diff, exactly the action's, as plain text that nothing renders.
    const opened = (await page.goto(`${app.url}${link}`))!;
    expect([opened.status(), opened.headers()['content-type'], opened.headers()['content-security-policy']]).toEqual([
      200,
      'text/plain; charset=utf-8',
      expect.stringContaining('sandbox'),
    ]);
    expect(await opened.text()).toBe(whole);

    // Another session has not opened it: its approval is still refused.
    const bob = await signIn(app.url, { token: TOKEN, name: 'bob' });
    const bobCard = await (await fetch(card, { headers: { cookie: bob.cookie! } })).text();
    expect(bobCard).toMatch(/<button type="submit" name="decision" value="approve" id="approve" disabled>/);
    const bobPost = await fetch(`${card}/approval`, {
      method: 'POST',
      headers: { cookie: bob.cookie! },
      redirect: 'manual',
      body: new URLSearchParams({
        csrf: /name="csrf" value="([^"]+)"/.exec(bobCard)![1],
        action_id: big.action_id,
        args_digest: big.args_digest,
        workspace_digest: big.workspace_digest,
        decision: 'approve',
      }),
    });
    expect(bobPost.status).toBe(403);
    await nothingRecorded();

    // This session opened it: Approve is unlocked and taken.
    await page.goto(card);
    expect([await page.isDisabled('#approve'), await text('#diff-cut')]).toEqual([false, expect.stringMatching(/Approve is unlocked/)]);
    await Promise.all([page.waitForURL(/notice=approved/), page.click('#approve')]);

    // The second large file is rejected at once, its whole diff never opened.
    const extra = await pendingApproval(handle, big.action_id);
    await cardShows(handle.workflowId, 'tests/test_agent_extra.py');
    expect([extra.diff_truncated, await page.isDisabled('#approve')]).toEqual([true, true]);
    await page.fill('#reason', 'no second file');
    await Promise.all([page.waitForURL(/notice=rejected/), page.click('#reject')]);

    // A diff that was not cut needs no extra step.
    const fix = await pendingApproval(handle, extra.action_id);
    await cardShows(handle.workflowId, 'src/linkcheck.py');
    expect([fix.diff_truncated, await page.locator('#diff-cut').count(), await page.isDisabled('#approve')]).toEqual([false, 0, false]);
    await Promise.all([page.waitForURL(/notice=approved/), page.click('#approve')]);

    const outcome = await handle.result();
    expect(outcome.record.status).toBe('completed');
    expect(approvals(traceIn(stateDir, handle.firstExecutionRunId)).map((a) => [a.action_id, a.decision, a.principal])).toEqual([
      [big.action_id, 'approve', 'console:alice'],
      [extra.action_id, 'reject', 'console:alice'],
      [fix.action_id, 'approve', 'console:alice'],
    ]);
    expect(outside.aborted).toEqual([]);
  });

  it('runs every page behind a guard that aborts and lists a request leaving loopback', async () => {
    expect(
      [
        'http://127.0.0.1:1/',
        'http://127.9.8.7/',
        'http://localhost:8233/x',
        'http://[::1]:80/',
        'ws://127.0.0.1/ws',
        'file:///tmp/r.html',
        'data:text/plain,x',
        'about:blank',
      ].filter((u) => !staysLocal(u)),
    ).toEqual([]);
    expect(
      [
        'https://temporal.io/api/news',
        'http://10.0.0.1/',
        'http://[::ffff:7f00:1]/',
        'http://127.0.0.1.example.com/',
        'chrome://version',
        'not a url',
      ].filter(staysLocal),
    ).toEqual([]);
    // The IPv4-mapped form of 127.0.0.1 is outside the loopback list yet lands on this machine, so
    // a guard that let it through would show up as a hit here, never as traffic leaving.
    const hits: string[] = [];
    const server = createServer((req, res) => {
      hits.push(req.url!);
      res.end();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    const { page: tab, context, outside: seen } = await browser.newPage();
    try {
      await tab.goto(`http://127.0.0.1:${port}/page`);
      const mapped = `http://[::ffff:7f00:1]:${port}/mapped.png`;
      const outcome = new Promise<string>((resolve) => {
        tab.on('requestfailed', (r) => r.url() === mapped && resolve(r.failure()?.errorText ?? 'failed'));
        tab.on('requestfinished', (r) => r.url() === mapped && resolve('reached the server'));
      });
      await tab.setContent(`<img src="${mapped}">`);
      expect(await outcome).toMatch(/^net::ERR_BLOCKED_BY_CLIENT/);
      expect([seen.aborted, hits.filter((h) => h !== '/favicon.ico')]).toEqual([[mapped], ['/page']]);
    } finally {
      await context.close();
      server.close();
    }
  });

  describe('sign-in and sessions, on an injected clock', () => {
    let clock = Date.parse('2030-01-01T00:00:00Z');
    let timed: RunningConsole;
    const get = (path: string, cookie?: string) => fetch(`${timed.url}${path}`, { headers: cookie ? { cookie } : {}, redirect: 'manual' });
    /** A session made with the typed token. */
    const session = async (name = 'alice') => {
      const made = await signIn(timed.url, { token: TOKEN, name });
      expect([made.status, made.cookie]).toEqual([303, expect.stringMatching(/^agent_console=[\w-]{43}$/)]);
      return made.cookie!;
    };
    /** Authenticated and cheap: an unknown run is a 404 only for a live session (401 otherwise). */
    const alive = async (cookie: string) => {
      const status = (await get('/runs/no-such-run', cookie)).status;
      if (status !== 404 && status !== 401) throw new Error(`unexpected status ${status}`);
      return status === 404;
    };

    beforeAll(async () => {
      timed = await startConsole({
        client: env.client,
        token: TOKEN,
        host: '127.0.0.1',
        port: 0,
        webUi: null,
        namespace: 'default',
        now: () => clock,
      });
    });
    afterAll(async () => {
      await timed?.close();
    });

    it('signs nobody in from a token in the address, and does not put it in the page', async () => {
      const res = await get(`/login?token=${TOKEN}`);
      const body = await res.text();
      expect([res.status, res.headers.get('set-cookie'), body.includes(TOKEN)]).toEqual([400, null, false]);
      // In the browser too: no cookie, and the form's token field is empty.
      const { page: tab, context: signedOut, outside: tabOutside } = await browser.newPage();
      try {
        expect((await tab.goto(`${timed.url}/login?token=${TOKEN}`))?.status()).toBe(400);
        expect(await tab.inputValue('#token')).toBe('');
        expect(await tab.content()).not.toContain(TOKEN);
        expect(await signedOut.cookies()).toEqual([]);
        // Typing the token into the form is the way in.
        await tab.fill('#token', TOKEN);
        await tab.fill('#name', 'carol');
        await Promise.all([tab.waitForURL(`${timed.url}/`), tab.click('#sign-in-button')]);
        expect(await tab.textContent('#sign-out')).toContain('console:carol');
        await tab.screenshot({ path: testOutput('console-signed-in.png'), fullPage: true });
        expect(tabOutside.aborted).toEqual([]);
      } finally {
        await signedOut.close();
      }
    });

    it('takes a one-time code once: looking at the link does not use it, a second sign-in answers 401', async () => {
      const link = timed.signInLink();
      const code = codeOf(link);
      for (let i = 0; i < 2; i++) {
        const res = await fetch(link);
        expect([res.status, await res.text()]).toEqual([200, expect.stringContaining(`<input type="hidden" name="code" value="${code}">`)]);
      }
      const bad = await signIn(timed.url, { code, name: 'no spaces allowed' });
      expect([bad.status, bad.cookie]).toEqual([400, null]);
      const first = await signIn(timed.url, { code, name: 'dave' });
      expect(first.status).toBe(303);
      expect(await alive(first.cookie!)).toBe(true);
      const second = await signIn(timed.url, { code, name: 'eve' });
      expect([second.status, second.cookie]).toEqual([401, null]);
      expect((await fetch(link)).status).toBe(401);
      // Each link carries its own code; a made-up one is refused.
      expect(codeOf(timed.signInLink())).not.toBe(code);
      expect((await signIn(timed.url, { code: 'made-up-code', name: 'eve' })).status).toBe(401);
    });

    it('refuses a code once its ten minutes are over', async () => {
      const code = codeOf(timed.signInLink());
      clock += CODE_TTL_MS - 1;
      expect((await get(`/login?code=${code}`)).status).toBe(200);
      clock += 1;
      expect((await get(`/login?code=${code}`)).status).toBe(401);
      const late = await signIn(timed.url, { code, name: 'dave' });
      expect([late.status, late.cookie]).toEqual([401, null]);
    });

    it('ends a session after 12 hours idle; each request restarts the idle timer', async () => {
      const cookie = await session();
      clock += SESSION_IDLE_MS - 60_000;
      expect(await alive(cookie)).toBe(true);
      clock += SESSION_IDLE_MS - 60_000;
      expect(await alive(cookie)).toBe(true);
      clock += SESSION_IDLE_MS;
      const res = await get('/', cookie);
      expect([res.status, res.headers.get('set-cookie')]).toEqual([401, expect.stringMatching(/^agent_console=; .*Max-Age=0/)]);
      expect(await alive(cookie)).toBe(false);
    });

    it('ends a session 24 hours after sign-in, even one used every hour', async () => {
      const cookie = await session();
      for (let hours = 1; hours < SESSION_MAX_MS / 3600_000; hours++) {
        clock += 3600_000;
        expect(await alive(cookie)).toBe(true);
      }
      clock += 3600_000;
      const res = await get('/', cookie);
      expect([res.status, res.headers.get('set-cookie')]).toEqual([401, expect.stringMatching(/^agent_console=; .*Max-Age=0/)]);
      expect(await alive(cookie)).toBe(false);
    });

    it('signs out with the button: the cookie is cleared and the old one answers 401', async () => {
      const { page: tab, context, outside: tabOutside } = await browser.newPage();
      try {
        await tab.goto(timed.signInLink());
        await tab.fill('#name', 'frank');
        await Promise.all([tab.waitForURL(`${timed.url}/`), tab.click('#sign-in-button')]);
        const [cookie] = await context.cookies();
        expect(cookie.name).toBe('agent_console');
        const old = `${cookie.name}=${cookie.value}`;
        // Without the session's CSRF token, sign-out is refused and the session lives on.
        const forged = await fetch(`${timed.url}/logout`, {
          method: 'POST',
          body: new URLSearchParams({ csrf: 'not-the-token' }),
          headers: { cookie: old },
          redirect: 'manual',
        });
        expect(forged.status).toBe(403);
        expect(await alive(old)).toBe(true);
        await Promise.all([tab.waitForURL(`${timed.url}/login`), tab.click('#sign-out-button')]);
        expect(await context.cookies()).toEqual([]);
        expect((await get('/', old)).status).toBe(401);
        expect((await tab.goto(`${timed.url}/`))?.status()).toBe(401);
        expect(tabOutside.aborted).toEqual([]);
      } finally {
        await context.close();
      }
    });

    it(`keeps at most ${MAX_SESSIONS} sessions: the next one drops the least recently used`, async () => {
      clock += SESSION_IDLE_MS; // the sessions of the tests before have ended
      const cookies: string[] = [];
      for (let i = 0; i < MAX_SESSIONS; i++) cookies.push(await session(`user-${i}`));
      // The first is used again, so the second is now the least recently used.
      expect(await alive(cookies[0])).toBe(true);
      const newest = await session('one-too-many');
      expect([await alive(cookies[1]), await alive(cookies[0]), await alive(cookies[2]), await alive(newest)]).toEqual([
        false,
        true,
        true,
        true,
      ]);
      expect((await Promise.all(cookies.slice(2).map(alive))).every(Boolean)).toBe(true);
    });
  });

  describe('security', () => {
    let handle: WorkflowHandle;
    let pending: Awaited<ReturnType<typeof pendingApproval>>;
    let cookie: string;
    let csrf: string;

    beforeAll(async () => {
      handle = await startRun();
      pending = await pendingApproval(handle);
      const login = await fetch(`${app.url}/login`, {
        method: 'POST',
        body: new URLSearchParams({ token: TOKEN, name: 'mallory-test' }),
        redirect: 'manual',
      });
      expect(login.status).toBe(303);
      cookie = login.headers.get('set-cookie')!.split(';')[0];
      const card = await (await fetch(`${app.url}/runs/${encodeURIComponent(handle.workflowId)}`, { headers: { cookie } })).text();
      csrf = /name="csrf" value="([^"]+)"/.exec(card)![1];
    });

    const form = (fields: Record<string, string>) => ({
      action_id: pending.action_id,
      args_digest: pending.args_digest,
      workspace_digest: pending.workspace_digest,
      decision: 'approve',
      csrf,
      ...fields,
    });
    const post = (fields: Record<string, string>, headers: Record<string, string> = { cookie }) =>
      fetch(`${app.url}/runs/${encodeURIComponent(handle.workflowId)}/approval`, {
        method: 'POST',
        body: new URLSearchParams(fields),
        headers,
        redirect: 'manual',
      });
    /** The run is exactly as it was: the same action pending, no approval recorded, nothing written. */
    async function unchanged(ignored = 0) {
      const view = await queryState(handle);
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
      expect((await fetch(`${app.url}/login?code=not-a-code`)).status).toBe(401);
      const wrong = await fetch(`${app.url}/login`, {
        method: 'POST',
        body: new URLSearchParams({ token: 'wrong-token-0123456789', name: 'eve' }),
        redirect: 'manual',
      });
      expect([wrong.status, wrong.headers.get('set-cookie')]).toEqual([401, null]);
      expect((await post(form({}), {})).status).toBe(401);
      await unchanged();
    });

    it('refuses a state change without the session CSRF token, or by GET', async () => {
      expect((await post(form({ csrf: 'not-the-token' }))).status).toBe(403);
      const { csrf: _omit, ...withoutCsrf } = form({});
      expect((await post(withoutCsrf)).status).toBe(403);
      expect(
        (
          await fetch(`${app.url}/runs/${encodeURIComponent(handle.workflowId)}/approval?${new URLSearchParams(form({}))}`, {
            headers: { cookie },
          })
        ).status,
      ).toBe(404);
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

    it('binds to loopback unless --host is given; another address only with --public-url https, then Secure and its name only', async () => {
      /** The console command line; `probe` runs against it once it serves, then it is stopped. */
      const start = (args: string[], probe: (url: string, link: string) => Promise<void> = async () => undefined) =>
        new Promise<{ stdout: string; stderr: string; code: number | null }>((resolve, reject) => {
          const child = spawn(process.execPath, [join(PROJECT_ROOT, 'dist', 'client', 'cli.js'), 'console', '--port', '0', ...args], {
            env: { ...process.env, TEMPORAL_ADDRESS: env.address, AGENT_STATE_DIR: stateDir },
            cwd: PROJECT_ROOT,
          });
          let stdout = '';
          let stderr = '';
          let probed: Promise<void> | null = null;
          child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
          child.stdout.on('data', (c: Buffer) => {
            stdout += c.toString();
            const [, url, link] = /^console on (\S+); sign in at (\S+) .*\nor sign in at .*\n/.exec(stdout) ?? [];
            if (url && probed === null) probed = probe(url, link).finally(() => child.kill('SIGTERM'));
          });
          child.once('exit', (code) => void (probed ?? Promise.resolve()).then(() => resolve({ stdout, stderr, code }), reject));
          child.once('error', reject);
        });
      // Without --token-file: a one-time link is printed, and a fresh token goes to a 0600 file in
      // the state folder, never to the output.
      const tokenFile = join(stateDir, 'console-token');
      const apiTokens = join(stateDir, 'api-tokens');
      const quote = (path: string) => path.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
      let fresh = '';
      const seen: Record<string, unknown> = {};
      const local = await start([], async (url, link) => {
        fresh = readFileSync(tokenFile, 'utf8').trim();
        seen.mode = statSync(tokenFile).mode & 0o777;
        seen.look = (await fetch(link)).status;
        seen.first = (await signIn(url, { code: codeOf(link), name: 'grace' })).status;
        seen.again = (await signIn(url, { code: codeOf(link), name: 'grace' })).status;
        seen.typed = (await signIn(url, { token: fresh, name: 'grace' })).status;
        // Where it listens, for the command line of this state folder, and a token for it beside the console's.
        seen.record = JSON.parse(readFileSync(join(stateDir, 'console.json'), 'utf8')).url === url;
        seen.apiTokens = [statSync(apiTokens).mode & 0o777, /^cli [\w-]{43}$/m.test(readFileSync(apiTokens, 'utf8'))];
      });
      expect(local.stdout).toMatch(
        new RegExp(
          `^console on http://127\\.0\\.0\\.1:\\d+; sign in at http://127\\.0\\.0\\.1:\\d+/login\\?code=[\\w-]{43} \\(one use, within 10 minutes\\)\nor sign in at http://127\\.0\\.0\\.1:\\d+/login with the token in ${quote(tokenFile)}\nmachine clients: http://127\\.0\\.0\\.1:\\d+/api/runs/<workflow-id>/events with a bearer token of ${quote(apiTokens)}\n$`,
        ),
      );
      expect([fresh, seen]).toEqual([
        expect.stringMatching(/^[\w-]{32}$/),
        { mode: 0o600, look: 200, first: 303, again: 401, typed: 303, record: true, apiTokens: [0o600, true] },
      ]);
      expect(local.stdout).not.toContain(fresh);
      expect(local.stdout).not.toContain(readFileSync(apiTokens, 'utf8').split('\n')[1].split(' ')[1]);
      expect(existsSync(join(stateDir, 'console.json'))).toBe(false);
      expect(local.stderr).not.toContain('warning');
      // Off loopback without the operator's https address: refused in one line, nothing served or written.
      const tokenBefore = readFileSync(tokenFile, 'utf8');
      const bare = await start(['--host', '0.0.0.0']);
      expect([bare.code, bare.stdout, bare.stderr]).toEqual([
        2,
        '',
        expect.stringMatching(/^console: 0\.0\.0\.0 is not a loopback address, .* --public-url https:\/\/NAME\[:PORT\] [^\n]*\n$/),
      ]);
      const plain = await start(['--host', '0.0.0.0', '--public-url', 'http://console.test']);
      expect([plain.code, plain.stdout, plain.stderr]).toEqual([
        2,
        '',
        expect.stringMatching(/^--public-url must be an https:\/\/ address[^\n]*\n$/),
      ]);
      expect(readFileSync(tokenFile, 'utf8')).toBe(tokenBefore);
      // Behind TLS by the operator's word: links to the public address, Secure cookies, only its name answered.
      const behind: Record<string, unknown> = {};
      const open = await start(['--host', '0.0.0.0', '--public-url', 'https://console.test'], async (url, link) => {
        const at = `http://127.0.0.1:${new URL(url).port}`;
        const made = await requestAs(`${at}/login`, 'console.test', { method: 'POST', form: { code: codeOf(link), name: 'ivan' } });
        const cookie = made.setCookie?.split(';')[0] ?? '';
        Object.assign(behind, {
          link,
          signIn: [made.status, made.setCookie],
          page: (await requestAs(`${at}/`, 'console.test', { cookie })).status,
          withPort: (await requestAs(`${at}/`, 'console.test:443', { cookie })).status,
          loopbackName: (await requestAs(`${at}/`, `127.0.0.1:${new URL(url).port}`, { cookie })).status,
          foreign: await requestAs(`${at}/`, 'attacker.example', { cookie }),
          otherPort: (await requestAs(`${at}/`, 'console.test:8443', { cookie })).status,
        });
      });
      expect(open.stdout).toMatch(/^console on http:\/\/0\.0\.0\.0:\d+;/);
      expect(open.stdout).toMatch(/\nor sign in at https:\/\/console\.test\/login with the token in /);
      expect(open.stderr).toContain('warning: serving the console on 0.0.0.0, not a loopback address');
      expect(behind).toEqual({
        link: expect.stringMatching(/^https:\/\/console\.test\/login\?code=[\w-]{43}$/),
        signIn: [303, expect.stringMatching(/^agent_console=[\w-]{43}; HttpOnly; SameSite=Strict; Path=\/; Secure$/)],
        page: 200,
        withPort: 200,
        loopbackName: 421,
        foreign: { status: 421, setCookie: null, body: 'misdirected request: this console answers only to console.test\n' },
        otherPort: 421,
      });

      // A token from a file: printed nowhere, and it signs in.
      const file = join(tempDir('console-token'), 'token');
      writeFileSync(file, `${TOKEN}\n`);
      let status = 0;
      const fromFile = await start(['--token-file', file], async (url) => {
        status = (await signIn(url, { token: TOKEN, name: 'heidi' })).status;
      });
      expect([status, fromFile.stdout.includes(TOKEN), fromFile.stdout.includes(`with the token in ${file}\n`)]).toEqual([
        303,
        false,
        true,
      ]);
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
