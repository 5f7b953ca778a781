/**
 * Jest's global tear-down. A test that failed midway may leave a worker or a command it started
 * running. Tests run in jest's worker processes, which end before this hook, so such a process
 * may have been handed to another parent: it is found by the environment every process of this
 * test run inherits (the history folder the global set-up names), and each one of the project's
 * (a worker or the command line) still alive is killed and named, so the leak is seen, not left
 * running.
 *
 * Then the history check ends: the replay processes of the global set-up finish the histories
 * the suites collected, and a nondeterminism on either workflow bundle fails the run, naming the
 * workflow and the test that started it (scripts/support/histories.ts).
 */
import { type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { mergeReports, type ReplayReport } from '../../scripts/support/histories';
import { REPLAYERS } from './global-setup';

const OURS = /dist\/(worker\/main|client\/cli)\.js/;

/** Kills and names the project's processes still running whose environment names `dir` as the run's history folder. */
export function killLeftovers(dir: string): void {
  const mark = `AGENT_TEST_HISTORIES=${dir}`;
  for (const pid of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    let args: string;
    let environ: string[];
    try {
      args = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').trim();
      environ = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
    } catch {
      continue; // it ended meanwhile, or it is not this user's
    }
    if (!OURS.test(args) || !environ.includes(mark)) continue;
    try {
      process.kill(Number(pid), 'SIGKILL');
      process.stderr.write(`global tear-down: killed process ${pid} left running by a test: ${args}\n`);
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
  const dir = process.env.AGENT_TEST_HISTORIES;
  if (dir) killLeftovers(dir);
  const replayers = (globalThis as Record<symbol, unknown>)[REPLAYERS] as ChildProcess[] | undefined;
  if (dir && replayers) await historyCheck(dir, replayers);
}
