/**
 * The state folder's console record: where a console that serves this state folder listens, so
 * the command line (`run --follow`, `status --follow`) reads a run's event stream from it, with
 * the API token the console keeps for the command line (token.ts `stateApiTokens`, name `cli`).
 *
 * Hazards: a record outlives a console killed without its cleanup, so it counts only while the
 * process it names lives; a record, a token file or a token that is not as expected means "no
 * console", and the command line reads the run as it does without one. The token is read from the
 * operator's file, never from the record.
 */
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { writeFileAtomic } from '../../host/files';
import { API_TOKENS_FILE, CLI_TOKEN_NAME, readApiTokens } from './token';

export const CONSOLE_RECORD = 'console.json';

export interface ConsoleRecord {
  /** Where it listens. */
  url: string;
  /** Where clients reach it (the operator's https address, else `url`): the Host it answers to. */
  public_url: string;
  pid: number;
}

/** Writes `<dir>/console.json` (mode 0600) and returns its path. */
export function writeConsoleRecord(dir: string, record: ConsoleRecord): string {
  const file = join(dir, CONSOLE_RECORD);
  writeFileAtomic(file, `${JSON.stringify(record)}\n`, { mode: 0o600 });
  return file;
}

/** Removes the record at `file` when it still names this process (another console may have taken its place). */
export function removeConsoleRecord(file: string): void {
  try {
    if ((JSON.parse(readFileSync(file, 'utf8')) as ConsoleRecord).pid === process.pid) rmSync(file, { force: true });
  } catch {
    // Gone already, or another console's: nothing of this one's to remove.
  }
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
};

/** The console serving `stateDir` and the command line's token for it, or why there is none to use. */
export function consoleFor(stateDir: string): { url: string; token: string } | { none: string } {
  const file = join(stateDir, CONSOLE_RECORD);
  if (!existsSync(file)) return { none: 'no console serves this state folder' };
  let record: ConsoleRecord;
  try {
    record = JSON.parse(readFileSync(file, 'utf8')) as ConsoleRecord;
  } catch {
    return { none: `${file} is not a console record` };
  }
  if (!Number.isInteger(record.pid) || typeof record.public_url !== 'string' || !alive(record.pid))
    return { none: 'the console that served this state folder is gone' };
  try {
    const token = readApiTokens(join(stateDir, API_TOKENS_FILE)).get(CLI_TOKEN_NAME);
    return token === undefined ? { none: `${API_TOKENS_FILE} has no token named ${CLI_TOKEN_NAME}` } : { url: record.public_url, token };
  } catch (err) {
    return { none: (err as Error).message };
  }
}
