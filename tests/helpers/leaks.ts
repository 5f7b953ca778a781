/** The leak grep: where any of some secret strings occurs in a history, folders and files. */
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { temporalBinary } from '../../host/temporal-bin';
import { SETTINGS } from './run-dir';

/**
 * A workflow's whole history as the `temporal` CLI prints it (JSON), followed by every payload
 * decoded: the CLI shows payload data base64-encoded, where a plain grep would never find a value.
 */
export async function historyJson(address: string, workflowId: string): Promise<string> {
  const { stdout } = await promisify(execFile)(
    temporalBinary(SETTINGS),
    ['workflow', 'show', '--address', address, '--workflow-id', workflowId, '-o', 'json'],
    { maxBuffer: 256 * 1024 * 1024 },
  );
  const decoded: string[] = [];
  JSON.parse(stdout, (key, value) => {
    if ((key === 'data' || key === 'encoding') && typeof value === 'string') decoded.push(Buffer.from(value, 'base64').toString('utf8'));
    return value;
  });
  return `${stdout}\n${decoded.join('\n')}`;
}

/** Every 8-character piece of a secret (what a masked echo of it may show). */
export function fragments(secret: string, size = 8): string[] {
  return Array.from({ length: secret.length - size + 1 }, (_, i) => secret.slice(i, i + size));
}

/** Names of the places (`label` for texts, paths for files under `dirs`, `files`) holding any needle. */
export function leaks(needles: string[], where: { texts?: Record<string, string>; dirs?: string[]; files?: string[] }): string[] {
  const hits: string[] = [];
  const holds = (bytes: Buffer | string) => needles.some((n) => bytes.includes(n));
  for (const [label, text] of Object.entries(where.texts ?? {})) if (holds(text)) hits.push(label);
  const visit = (path: string) => {
    const st = statSync(path, { throwIfNoEntry: false });
    if (!st) return;
    if (st.isDirectory()) for (const name of readdirSync(path)) visit(join(path, name));
    else if (st.isFile() && holds(readFileSync(path))) hits.push(path);
  };
  for (const dir of where.dirs ?? []) visit(dir);
  for (const file of where.files ?? []) visit(file);
  return hits;
}
