/**
 * Decision sources. A replay is read once, when the run starts, and kept in the host store: the
 * run uses that content to its end (continue-as-new included), whatever happens to the file.
 * The `decide` activity gets the transcript by reference, never the run's history itself.
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import type { Decision } from '../core/contracts';
import { replaySchema, type Replay } from '../core/contracts';
import { formatIssues } from '../core/validate';

export class ReplayFileError extends Error {
  override name = 'ReplayFileError';
}

export function loadReplay(path: string): Replay {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(resolve(path), 'utf8'));
  } catch (err) {
    throw new ReplayFileError(`cannot read replay ${path}: ${(err as Error).message}`);
  }
  const parsed = replaySchema.safeParse(raw);
  if (!parsed.success) throw new ReplayFileError(`replay ${path} is invalid: ${formatIssues(parsed.error)}`);
  return parsed.data;
}

/** The replay's next decision after `cursor` decisions taken, or undefined when it has run out. */
export function replayNext(replay: Replay, cursor: number): Decision | undefined {
  return replay.decisions[cursor];
}
