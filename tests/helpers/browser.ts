/**
 * A real headless Chromium for the browser tests: Debian's `chromium` (scripts/ensure-chromium.sh
 * installs it when missing; CHROMIUM_BIN names another), driven by playwright-core. Screenshots go
 * to the test output folder, `test-output/` in the project (or AGENT_TEST_OUTPUT).
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import { PROJECT_ROOT } from './run-dir';

export function chromiumPath(): string {
  return execFileSync('bash', [join(PROJECT_ROOT, 'scripts', 'ensure-chromium.sh')], { encoding: 'utf8' }).trim();
}

export function launchChromium(): Promise<Browser> {
  // The sandbox of Chromium needs user namespaces that a root test process in a container lacks.
  return chromium.launch({ executablePath: chromiumPath(), args: ['--no-sandbox'], headless: true });
}

export function testOutput(...parts: string[]): string {
  const dir = process.env.AGENT_TEST_OUTPUT || join(PROJECT_ROOT, 'test-output');
  mkdirSync(dir, { recursive: true });
  return join(dir, ...parts);
}
