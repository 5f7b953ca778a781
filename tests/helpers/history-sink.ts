/**
 * Jest's set-up of each test file (setupFilesAfterEnv): the file's history sink, so every server
 * its tests stop has its workflow histories fetched first (scripts/support/histories.ts), each
 * named by the test that was running when the workflow started. The replay is jest's global
 * tear-down's. Without a sink folder (no global set-up) nothing is collected.
 */
import { join, relative } from 'node:path';
import { HistorySink, useHistorySink } from '../../scripts/support/histories';
import { PROJECT_ROOT } from './run-dir';

const dir = process.env.AGENT_TEST_HISTORIES;
if (dir) {
  const file = relative(join(PROJECT_ROOT, 'dist'), expect.getState().testPath!).replace(/\.js$/, '.ts');
  /** The file's tests as they ran: each name with when it began and ended. */
  const ran: { name: string; began: number; ended: number | null }[] = [];
  const attribute = (at: number | null): string => {
    const test = at === null ? undefined : ran.find((t) => t.began <= at && (t.ended === null || at <= t.ended));
    if (test) return `${file} › ${test.name}`;
    if (at !== null && (ran.length === 0 || at < ran[0].began)) return `${file} (before its tests)`;
    return `${file} (between or after its tests)`;
  };
  useHistorySink(new HistorySink(join(dir, `${file.replace(/[/\\]/g, '+')}.ndjson`), attribute));
  beforeEach(() => {
    ran.push({ name: expect.getState().currentTestName ?? '?', began: Date.now(), ended: null });
  });
  afterEach(() => {
    ran[ran.length - 1].ended = Date.now();
  });
}
