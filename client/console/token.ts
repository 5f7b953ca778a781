/**
 * The console token: the first line of a file the person names, or a fresh one the console makes
 * and writes to `<state>/console-token` so it can be typed into the sign-in form later. It is
 * never printed and never put in a URL.
 *
 * Hazard: the file holds a secret: it is written whole (host/files.ts) with mode 0600 from its
 * first byte, so a reader sees the old token or the new one, never half a line or wider rights.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { writeFileAtomic } from '../../host/files';

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
  writeFileAtomic(file, `${token}\n`, { mode: 0o600 });
  return { token, file };
}
