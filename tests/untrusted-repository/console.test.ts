/**
 * Text a repository or a model wrote reaches the console only as text: a proposed file holding
 * HTML and script, shown on the card (its first 32 KiB, escaped under a policy that runs only the
 * console's own script, by its hash), carried by the run's event stream to that script (which sets
 * text only), and as the whole diff (plain text under a sandboxing policy), in a real headless
 * Chromium against a real dev server and worker. A listener on loopback that the markup points at
 * counts every request.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { LIVE_SCRIPT } from '../../client/console/live-script';
import { startConsole, type RunningConsole } from '../../client/console/server';
import * as access from '../../client/run-access';
import type { HostWorkers } from '../../worker';
import { launchChromium, type TestBrowser } from '../helpers/browser';
import { commentLines, creationDiff, grownCanonical } from '../helpers/large-diff';
import { tempDir } from '../helpers/run-dir';
import { canonicalInput, inProcessWorker, pendingApproval, startServer, uniqueQueue } from '../helpers/temporal';

describe('the console and untrusted diff text', () => {
  let env: TestWorkflowEnvironment;
  let worker: HostWorkers;
  let running: Promise<void>;
  let closeWorker: () => void;
  let app: RunningConsole;
  let browser: TestBrowser;
  let trap: Server;
  const hits: string[] = [];
  const stateDir = tempDir('untrusted-console-state');
  const taskQueue = uniqueQueue('untrusted-console');

  beforeAll(async () => {
    env = await startServer();
    ({ worker, close: closeWorker } = await inProcessWorker(env, taskQueue, stateDir));
    running = worker.run();
    app = await startConsole({
      client: env.client,
      token: 'untrusted-console-token-0123',
      host: '127.0.0.1',
      port: 0,
      webUi: null,
      namespace: 'default',
      stateDir,
    });
    trap = createServer((req, res) => {
      hits.push(req.url!);
      res.end();
    });
    await new Promise<void>((resolve) => trap.listen(0, '127.0.0.1', resolve));
    browser = await launchChromium();
  });

  afterAll(async () => {
    await browser?.close();
    trap?.close();
    await app?.close();
    worker?.shutdown();
    await running;
    closeWorker?.();
    await env?.teardown();
  });

  it('shows HTML and script from a proposed file as inert text on the card and in the whole diff', async () => {
    const origin = `http://127.0.0.1:${(trap.address() as AddressInfo).port}`;
    const markup = (at: string) =>
      `# </pre><script>fetch("${origin}/script-${at}")</script><img src="${origin}/img-${at}"><b id="injected-${at}">x</b>\n`;
    // The markup near the top is on the card; the one past 32 KiB only in the whole diff.
    const { path, test } = grownCanonical((t) => markup('top') + t + commentLines('filler', 600) + markup('end'));
    const handle = await access.startRun(
      env.client,
      canonicalInput('canonical', { approver: 'interactive', source: { kind: 'replay', path, trusted: true } }),
      { taskQueue, workflowId: `${taskQueue}-run` },
    );
    const { page, context, outside } = await browser.newPage();
    try {
      const pending = await pendingApproval(handle);
      expect([pending.diff_truncated, pending.diff.includes('injected-top'), pending.diff.includes('injected-end')]).toEqual([
        true,
        true,
        false,
      ]);
      await page.goto(app.signInLink());
      await page.fill('#name', 'alice');
      await Promise.all([page.waitForURL(`${app.url}/`), page.click('#sign-in-button')]);

      await page.goto(`${app.url}/runs/${encodeURIComponent(handle.workflowId)}`);
      expect(await page.textContent('#diff')).toContain(`+${markup('top').trimEnd()}`);
      // The stream has delivered the run's state (the markup in its pending diff) and a hint to the page's script.
      await page.waitForSelector('#live-state:text-is("live")');
      await page.waitForSelector('#hint:text-is("waiting for approval")');
      expect([
        await page.locator('[id^=injected], #diff script, #diff img').count(),
        await page.$$eval('script', (all) => all.map((s) => s.textContent)),
      ]).toEqual([0, [LIVE_SCRIPT]]);

      const whole = (await page.goto(`${app.url}${await page.getAttribute('#whole-diff', 'href')}`))!;
      expect(await whole.text()).toBe(creationDiff(pending.path, test));
      expect([await page.locator('[id^=injected]').count(), await page.locator('script, img').count()]).toEqual([0, 0]);
      expect(await page.locator('body').textContent()).toContain(markup('end').trimEnd());
      expect([hits, outside.aborted]).toEqual([[], []]);
    } finally {
      await context.close();
      await handle.terminate('untrusted console test done');
    }
  });
});
