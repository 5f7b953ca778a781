/**
 * The console token: the first line of a file the person names, or a fresh one the console makes
 * and writes to `<state>/console-token` so it can be typed into the sign-in form later. It is
 * never printed and never put in a URL.
 *
 * Hazard: the file holds a secret: it is written whole (host/files.ts) with mode 0600 from its
 * first byte, so a reader sees the old token or the new one, never half a line or wider rights.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, statSync } from 'node:fs';
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

/** The operator's API tokens for machine clients, beside the console token. */
export const API_TOKENS_FILE = 'api-tokens';
/** The token the console makes for the command line of its state folder (`run --follow`, `status --follow`). */
export const CLI_TOKEN_NAME = 'cli';
const MIN_API_TOKEN_LENGTH = 32;
const TOKEN_NAME = /^[A-Za-z0-9_.-]{1,64}$/;

/**
 * The API tokens of `file`: one `NAME TOKEN` a line (blank lines and `#` comments aside), names
 * unique, tokens of at least 32 characters. The file holds secrets: one that others than its owner
 * may read is refused. Throws one line saying what is wrong.
 */
export function readApiTokens(file: string): Map<string, string> {
  if ((statSync(file).mode & 0o077) !== 0) throw new Error(`${file} may be read by others than its owner: chmod 600 it`);
  const tokens = new Map<string, string>();
  readFileSync(file, 'utf8')
    .split('\n')
    .forEach((raw, i) => {
      const line = raw.trim();
      if (line === '' || line.startsWith('#')) return;
      const [name, token, ...rest] = line.split(/\s+/);
      const where = `${file} line ${i + 1}`;
      if (rest.length > 0 || token === undefined) throw new Error(`${where}: a line is NAME TOKEN`);
      if (!TOKEN_NAME.test(name)) throw new Error(`${where}: a name is 1 to 64 letters, digits, dots, dashes or underscores`);
      if (token.length < MIN_API_TOKEN_LENGTH) throw new Error(`${where}: a token has at least ${MIN_API_TOKEN_LENGTH} characters`);
      if (tokens.has(name)) throw new Error(`${where}: the name ${name} is given twice`);
      tokens.set(name, token);
    });
  return tokens;
}

/**
 * The API tokens of the state folder's file; when there is none, it is made (mode 0600) with one
 * token for the command line (`cli`). Returns the file and its tokens.
 */
export function stateApiTokens(stateDir: string): { file: string; tokens: Map<string, string> } {
  const file = join(stateDir, API_TOKENS_FILE);
  if (!existsSync(file)) {
    const line = `${CLI_TOKEN_NAME} ${randomBytes(32).toString('base64url')}`;
    writeFileAtomic(file, `# NAME TOKEN, one a line: machine clients send Authorization: Bearer TOKEN\n${line}\n`, { mode: 0o600 });
  }
  return { file, tokens: readApiTokens(file) };
}
