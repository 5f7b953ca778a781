/**
 * Jest's global set-up: the network guard, the suites as the operator of every worker they
 * start, and the history check: the folder where the histories of every server the suites stop
 * are collected (helpers/history-sink.ts), and one replay process per workflow bundle that
 * replays them as they come, at the lowest CPU priority (scripts/replay-histories.ts; the global
 * tear-down waits for them and reports). Child processes (workers, the command line) inherit
 * this environment.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, openSync } from 'node:fs';
import { setPriority, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import networkGuard from './network-guard';

/** The replay processes, for the global tear-down (jest runs both hooks in its own process). */
export const REPLAYERS = Symbol.for('coding-agent.history-replayers');

export default async function globalSetup(): Promise<void> {
  await networkGuard();
  const dir = mkdtempSync(join(tmpdir(), 'agent-test-histories-'));
  process.env.AGENT_TEST_HISTORIES = dir;
  const script = resolve(__dirname, '..', '..', 'scripts', 'replay-histories.js');
  const replayers: ChildProcess[] = (['traced', 'plain'] as const).map((bundle) => {
    const log = openSync(join(dir, `replay-${bundle}.log`), 'w');
    const child = spawn(process.execPath, [script, dir, bundle, String(process.pid)], { stdio: ['ignore', 'ignore', log] });
    // The suites come first: the replays take what they leave of the machine.
    if (child.pid !== undefined) setPriority(child.pid, 19);
    return child;
  });
  (globalThis as Record<symbol, unknown>)[REPLAYERS] = replayers;
  // The suites run their fixtures on the local backend: they allow it, as an operator would
  // (AGENT_ALLOW_LOCAL). A test of the refusal gives its worker settings without it.
  process.env.AGENT_ALLOW_LOCAL = '1';
}
