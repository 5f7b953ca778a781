/**
 * Jest's global tear-down: a test that failed midway may leave a worker or a command it started
 * running, and its pipes would keep jest from exiting. Tests run in jest's own process
 * (`maxWorkers: 1`), so such processes are its children: each one of the project's (a worker or
 * the command line) still alive is killed and named, so the leak is seen, not waited on.
 */
import { execFileSync } from 'node:child_process';

const OURS = /dist\/(worker\/main|client\/cli)\.js/;

export default function killLeftovers(): void {
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
