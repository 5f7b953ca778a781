/**
 * Replays whose writes have diffs past the 32 KiB an action carries for display: the canonical
 * replay with its new test file grown by comment lines, and more new files proposed after it.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createTwoFilesPatch } from 'diff';
import { LINKCHECK } from './run-dir';
import { writeReplay } from './temporal';

interface Decision {
  kind: string;
  call?: { call_id: string; name: string; arguments: Record<string, string> };
}

/** `n` Python comment lines of about 80 bytes, each naming `tag` and its number. */
export const commentLines = (tag: string, n: number): string =>
  Array.from({ length: n }, (_, i) => `# ${tag} ${String(i).padStart(5, '0')}: ${'-'.repeat(64)}\n`).join('');

/**
 * The canonical replay with `grow` applied to the text of the test file it creates, and each of
 * `files` (path -> text) created by a proposal right after that one. Returns the replay's file and
 * the grown test text.
 */
export function grownCanonical(grow: (test: string) => string, files: Record<string, string> = {}): { path: string; test: string } {
  const decisions = (JSON.parse(readFileSync(join(LINKCHECK, 'replays', 'canonical.json'), 'utf8')) as { decisions: Decision[] }).decisions;
  const add = decisions.find((d) => d.call?.call_id === 'add-test')!;
  const test = grow(add.call!.arguments.new);
  add.call!.arguments.new = test;
  const more = Object.entries(files).map(([path, text], i) => ({
    kind: 'tool',
    call: { call_id: `add-file-${i}`, name: 'apply_patch', arguments: { path, version: 'absent', old: '', new: text } },
  }));
  decisions.splice(decisions.indexOf(add) + 1, 0, ...more);
  return { path: writeReplay(decisions), test };
}

/** The unified diff apply_patch makes when it creates `path` with `text`. */
export const creationDiff = (path: string, text: string): string =>
  createTwoFilesPatch('/dev/null', `b/${path}`, '', text, undefined, undefined, { context: 3 });
