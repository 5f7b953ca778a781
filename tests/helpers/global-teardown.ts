/**
 * Jest's global tear-down. A test that failed midway may leave a worker or a command it started
 * running, and its pipes would keep jest from exiting. Tests run in jest's own process
 * (`maxWorkers: 1`), so such processes are its children: each one of the project's (a worker or
 * the command line) still alive is killed and named, so the leak is seen, not waited on.
 *
 * Then the history check ends: the replay processes of the global set-up finish the histories
 * the suites collected, and a nondeterminism on either workflow bundle fails the run, naming the
 * workflow and the test that started it (scripts/support/histories.ts).
 */
import { execFileSync, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { mergeReports, type ReplayReport } from '../../scripts/support/histories';
import { REPLAYERS } from './global-setup';

const OURS = /dist\/(worker\/main|client\/cli)\.js/;

function killLeftovers(): void {
  let listing = '';
  try {
    listing = execFileSync('ps', ['-o', 'pid=,args=', '--ppid', String(process.pid)], { encoding: 'utf8' });
  } catch {
    return; // no children: ps exits 1
  }
  for (const line of listing.split('\n')) {
    const match = /^\s*(\d+)\s+(.*)$/.exec(line);
    if (!match || !OURS.test(match[2])) continue;
    try {
      process.kill(Number(match[1]), 'SIGKILL');
      process.stderr.write(`global tear-down: killed process ${match[1]} left running by a test: ${match[2]}\n`);
    } catch {
      // it ended meanwhile
    }
  }
}

const ended = (child: ChildProcess) =>
  new Promise<void>((resolve) => (child.exitCode !== null || child.signalCode !== null ? resolve() : child.once('exit', () => resolve())));

async function historyCheck(dir: string, replayers: ChildProcess[]): Promise<void> {
  const began = Date.now();
  writeFileSync(join(dir, 'done'), '');
  await Promise.all(replayers.map(ended));
  const waited = (Date.now() - began) / 1000;
  const reports: ReplayReport[] = [];
  for (const bundle of ['traced', 'plain']) {
    const file = join(dir, `report-${bundle}.json`);
    if (!existsSync(file))
      throw new Error(
        `history check: the replay on the ${bundle} bundle gave no report:\n${readFileSync(join(dir, `replay-${bundle}.log`), 'utf8')}`,
      );
    reports.push(JSON.parse(readFileSync(file, 'utf8')) as ReplayReport);
  }
  const report = mergeReports(reports);
  const skipped = Object.entries(report.skipped).map(([why, n]) => `${n} ${why}`);
  process.stdout.write(
    `\nhistory check: ${report.replayed} workflow histories the suites made replayed on both workflow bundles` +
      `, ${report.together} of them with an activity's result and a task's outcome or a timer in one workflow task` +
      ` (fetched in ${report.collect_seconds.toFixed(1)} s of the suites; ${report.seconds.toFixed(1)} s of replay beside them, ${waited.toFixed(1)} s after the last suite)` +
      `${skipped.length ? `; ${report.histories} fetched, left out: ${skipped.join(', ')}` : ''}: ` +
      `${report.failures.length === 0 ? 'no nondeterminism' : `${report.failures.length} failed`}\n`,
  );
  for (const server of report.unreachable) process.stdout.write(`history check: a server could not be read before it stopped: ${server}\n`);
  if (report.failures.length > 0) {
    const lines = report.failures.map(
      (f) => `  ${f.workflow_id} (run ${f.run_id}), made by ${f.test}, on the ${f.bundle} bundle: ${f.error}`,
    );
    throw new Error(`history check: ${report.failures.length} replays failed (the histories are kept in ${dir}):\n${lines.join('\n')}`);
  }
  rmSync(dir, { recursive: true, force: true });
}

export default async function globalTeardown(): Promise<void> {
  killLeftovers();
  const dir = process.env.AGENT_TEST_HISTORIES;
  const replayers = (globalThis as Record<symbol, unknown>)[REPLAYERS] as ChildProcess[] | undefined;
  if (dir && replayers) await historyCheck(dir, replayers);
}
