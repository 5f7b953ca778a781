/**
 * Decision sources. A replay is read once, when the run starts, and kept in the host store: the
 * run uses that content to its end (continue-as-new included), whatever happens to the file.
 * The `decide` activity gets the transcript by reference, never the run's history itself.
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import type { Decision, Usage } from '../core/contracts';
import { replaySchema, type Replay } from '../core/contracts';
import { formatIssues } from '../core/validate';
import type { RunFacts } from '../core/context';
import type { PromptRef } from '../core/prompt';
import type { DecisionView, PendingEntry } from '../core/transcript';

/** The decision source as the workflow passes it to `decide`: a replay by digest, or a provider. */
export type SourceRef =
  | { kind: 'replay'; digest: string }
  /** An endpoint of the worker's providers file, by name: its URL and key variable are looked up there at each call. */
  | {
      kind: 'provider';
      endpoint: string;
      provider: 'openai' | 'anthropic';
      model: string;
      /** The prompt version loadRun read, stored in the host store under its digest (absent in runs started before prompts were versioned). */
      prompt?: PromptRef;
    };

export interface DecideInput {
  run_id: string;
  source: SourceRef;
  /** Decisions already taken (the replay's cursor). */
  cursor: number;
  turn: number;
  /** Retries of this turn so far: part of a live request's identity. */
  retry: number;
  /** False for the wrap-up turn after the turn limit: the source may only summarise. */
  tools_enabled: boolean;
  /** The run may call the orchestration tools (sub-runs enabled). */
  orchestrating?: boolean;
  /**
   * An orchestrating run's task ids by title: a replay cannot know a run's ids in advance, so a
   * replayed call's `task_id` of `$task:<title>` means the task of that title.
   */
  tasks?: Record<string, string>;
  /** The transcript so far: its stored head and the entries not stored yet. */
  transcript: { head: string | null; append: PendingEntry[] };
  /** The authoritative facts a live context is rebuilt from (null for a replay). */
  facts: RunFacts | null;
  /**
   * A live run with `max_cost_usd`: US dollars it may still spend (its budget less what it spent
   * and what its tasks spent or hold). A request that could cost more is not sent.
   */
  cost_room_usd?: number;
}

/** How a live reply was had (absent for a replay and when no reply came). */
interface LiveReply {
  /** True when the context had to be compacted after the provider said it was too long. */
  compacted?: boolean;
  /** The response came from the host store: a retried activity, not a new provider request. */
  from_store?: boolean;
  /**
   * The provider's prompt cache on this call: `hit` when part of the input was read from it
   * (`usage.cached_tokens` > 0), and the input tokens written to it (Anthropic; 0 for OpenAI).
   */
  cache?: { hit: boolean; write_tokens: number };
}

/** What `decide` answers, with the build of the worker that answered (absent from histories recorded before it). */
export type DecideResult = (
  | ({ kind: 'decisions'; decisions: DecisionView[]; cursor: number; head: string | null; usage: Usage | null } & LiveReply)
  | { kind: 'exhausted'; head: string | null; usage: null }
  | ({
      kind: 'model_error';
      transient: boolean;
      retry_after_ms: number | null;
      detail: string;
      /** The reply was cut off by the output limit (none of its calls ran). */
      cut_off: boolean;
      /** The replay's model_error decision, to be kept in the transcript; null for a live failure. */
      ref: string | null;
      cursor: number;
      head: string | null;
      usage: Usage | null;
    } & LiveReply)
  | ({ kind: 'refused'; detail: string; head: string | null; usage: Usage | null } & LiveReply)
  /** The next request could cost more than `cost_room_usd`: it was not sent. */
  | { kind: 'over_budget'; estimate_usd: number; room_usd: number; head: string | null; usage: null }
) & { build?: string };

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
