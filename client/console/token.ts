/**
 * The console token: the first line of a file the person names, or a fresh one the console makes
 * and writes to `<state>/console-token` so it can be typed into the sign-in form later. It is
 * never printed and never put in a URL.
 *
 * Hazard: the file holds a secret, so it is created 0600 from its first byte (a temporary file
 * opened exclusively with that mode, never an old one reused with wider rights), fsynced, and
 * renamed over the old one, so a reader sees the old token or the new one, never half a line.
 */
import { randomBytes } from 'node:crypto';
import { closeSync, fsyncSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

export const TOKEN_FILE = 'console-token';
export const MIN_TOKEN_LENGTH = 16;

/** The first line of `file`, trimmed; throws when it is shorter than MIN_TOKEN_LENGTH. */
export function readToken(file: string): string {
  const token = readFileSync(file, 'utf8').split('\n')[0].trim();
  if (token.length < MIN_TOKEN_LENGTH) throw new Error(`the token (its first line) must be at least ${MIN_TOKEN_LENGTH} characters`);
  return token;
}

/** A fresh random token written to `<stateDir>/console-token` (mode 0600); returns it and the file. */
export function freshToken(stateDir: string): { token: string; file: string } {
  const token = randomBytes(24).toString('base64url');
  const file = join(stateDir, TOKEN_FILE);
  writeSecret(file, `${token}\n`);
  return { token, file };
}

function writeSecret(path: string, data: string): void {
  mkdirSync(dirname(path), { recursive: true });
  const tmp = `${path}.${process.pid}.tmp`;
  rmSync(tmp, { force: true });
  try {
    const fd = openSync(tmp, 'wx', 0o600);
    try {
      writeFileSync(fd, data);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, path);
  } catch (err) {
    rmSync(tmp, { force: true });
    throw err;
  }
  const dir = openSync(dirname(path), 'r');
  try {
    fsyncSync(dir);
  } finally {
    closeSync(dir);
  }
}
