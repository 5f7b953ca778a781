/**
 * A real headless Chromium for the browser tests: Debian's `chromium` (scripts/ensure-chromium.sh
 * installs it when missing; CHROMIUM_BIN names another), driven by playwright-core. Screenshots go
 * to the test output folder, `test-output/` in the project (or AGENT_TEST_OUTPUT).
 *
 * Tests never reach past this machine. Every page comes from `TestBrowser.newPage()`, in a fresh
 * context whose requests to anything but loopback (or `file:`, `data:`, `about:`) are aborted
 * before they leave and listed in `outside.aborted`, which each test asserts is empty; a page that
 * quietly fetches a font, a feed or a tracker then fails the test with the URL named. Chromium's
 * own background traffic (updates, sync, safe browsing lists) is switched off by its flags, since
 * it never passes through a page's routes.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { PROJECT_ROOT } from './run-dir';

export function chromiumPath(): string {
  return execFileSync('bash', [join(PROJECT_ROOT, 'scripts', 'ensure-chromium.sh')], { encoding: 'utf8' }).trim();
}

/** The requests a guarded context aborted because they would have left this machine. */
export interface OutsideRequests {
  aborted: string[];
}

export interface GuardedPage {
  page: Page;
  context: BrowserContext;
  outside: OutsideRequests;
}

/** A browser whose only pages are guarded ones: a test cannot open a page that reaches outside. */
export interface TestBrowser {
  /** A page in a fresh context (its own cookies), guarded by `guardOutside`. */
  newPage(): Promise<GuardedPage>;
  close(): Promise<void>;
}

const LOCAL_SCHEMES = ['file:', 'data:', 'about:'];

/** True for a URL that stays on this machine: loopback (127.0.0.0/8, ::1, localhost), file:, data:, about:. */
export function staysLocal(url: string): boolean {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return false;
  }
  if (LOCAL_SCHEMES.includes(u.protocol)) return true;
  if (!['http:', 'https:', 'ws:', 'wss:'].includes(u.protocol)) return false;
  // The URL parser has already normalised IPv4 forms (127.1, 0x7f000001) to dotted decimal.
  return u.hostname === 'localhost' || u.hostname === '[::1]' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(u.hostname);
}

/** Aborts and records every request (and WebSocket) of `context` that does not stay local. */
export async function guardOutside(context: BrowserContext): Promise<OutsideRequests> {
  const outside: OutsideRequests = { aborted: [] };
  await context.route('**/*', async (route) => {
    const url = route.request().url();
    if (staysLocal(url)) return route.continue();
    outside.aborted.push(url);
    return route.abort('blockedbyclient');
  });
  await context.routeWebSocket(
    () => true,
    (ws) => {
      if (staysLocal(ws.url())) return ws.connectToServer();
      outside.aborted.push(ws.url());
      return ws.close();
    },
  );
  return outside;
}

/** A fresh context with the guard installed, and a page in it. */
export async function guardedPage(browser: Browser): Promise<GuardedPage> {
  // Service workers fetch outside the page's routes; the pages under test need none.
  const context = await browser.newContext({ serviceWorkers: 'block' });
  const outside = await guardOutside(context);
  return { page: await context.newPage(), context, outside };
}

export async function launchChromium(): Promise<TestBrowser> {
  const browser = await chromium.launch({
    executablePath: chromiumPath(),
    headless: true,
    args: [
      // The sandbox of Chromium needs user namespaces that a root test process in a container lacks.
      '--no-sandbox',
      // No traffic of Chromium's own: component and extension updates, sync, field trials, QUIC
      // probes, default apps, domain reliability reports.
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
      '--disable-quic',
      '--disable-default-apps',
      '--disable-domain-reliability',
    ],
  });
  return { newPage: () => guardedPage(browser), close: () => browser.close() };
}

export function testOutput(...parts: string[]): string {
  const dir = process.env.AGENT_TEST_OUTPUT || join(PROJECT_ROOT, 'test-output');
  mkdirSync(dir, { recursive: true });
  return join(dir, ...parts);
}
