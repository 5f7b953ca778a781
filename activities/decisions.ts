/**
 * Decision sources. The activity receives everything a live model would need (the task, the tool
 * definitions generated from the zod schemas, and the run's history of decisions and results);
 * a replay simply takes its next recorded decision and ignores the rest.
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import type { Decision, DecisionSource, ToolResult } from '../core/contracts';
import { replaySchema, type Replay } from '../core/contracts';
import type { ToolDefinition } from '../core/tools';

/** One step of the run as a model sees it: a decision (with its tool result), or a user message. */
export type HistoryEntry = { decision: Decision; result?: ToolResult } | { message: string };

export interface DecideInput {
  source: DecisionSource;
  task: string;
  tools: ToolDefinition[];
  history: HistoryEntry[];
  /** False for the wrap-up turn after the turn limit: the source may only summarise. */
  tools_enabled: boolean;
}

export type DecideResult = { kind: 'decision'; decision: Decision } | { kind: 'exhausted' };

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
  if (!parsed.success) {
    throw new ReplayFileError(`replay ${path} is invalid: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
  }
  return parsed.data;
}

/** The replay's cursor is the number of decisions already taken, which the history records. */
export function replayDecide(path: string, history: HistoryEntry[]): DecideResult {
  const replay = loadReplay(path);
  const taken = history.filter((h) => 'decision' in h).length;
  const next = replay.decisions[taken];
  return next === undefined ? { kind: 'exhausted' } : { kind: 'decision', decision: next };
}
