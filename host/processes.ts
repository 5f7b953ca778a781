/**
 * Which processes are alive: the one check used by the worker records, the process-group records
 * of the local backend and the container backend's owner records.
 *
 * Hazard: a pid is reused once its process is gone. A process is therefore identified by its pid
 * and its start time (clock ticks since boot, /proc/<pid>/stat field 22), and a zombie (killed,
 * not yet reaped) counts as dead.
 */
import { existsSync, readFileSync } from 'node:fs';

export interface ProcessIdentity {
  pid: number;
  /** Start time in clock ticks since boot; null without /proc (then only the pid is checked). */
  start: number | null;
}

/** Whether this system has /proc (Linux): without it, only pids can be checked. */
export const HAS_PROC = existsSync('/proc/self/stat');

/** Fields of /proc/<pid>/stat, or null when the process is gone. The command name may hold spaces. */
export function procStat(pid: number): { state: string; pgid: number; start: number } | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' '); // fields 3.. of stat(5)
  return { state: fields[0], pgid: Number(fields[2]), start: Number(fields[19]) };
}

/** The identity of process `pid` now (of this process by default). */
export function identityOf(pid: number = process.pid): ProcessIdentity {
  return { pid, start: HAS_PROC ? (procStat(pid)?.start ?? null) : null };
}

/** True while the process lives (EPERM: alive, someone else's); with `start`, only that same process. */
export function processAlive(who: number | ProcessIdentity): boolean {
  const { pid, start } = typeof who === 'number' ? { pid: who, start: null } : who;
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ESRCH') return false;
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') throw err;
  }
  if (!HAS_PROC) return true;
  const stat = procStat(pid);
  return stat !== null && stat.state !== 'Z' && stat.state !== 'X' && (start === null || stat.start === start);
}

/** True while any process of group `pgid` lives. */
export function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Waits until the process has ended; false when it still lives after `timeoutMs`. */
export async function processEnded(who: number | ProcessIdentity, timeoutMs: number): Promise<boolean> {
  const until = Date.now() + timeoutMs;
  while (processAlive(who)) {
    if (Date.now() > until) return false;
    await new Promise((r) => setTimeout(r, 100));
  }
  return true;
}
