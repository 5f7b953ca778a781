/**
 * What Temporal history carries of a run's transcript: digests and short views. The full
 * decisions, calls and results live in the host store (store/store.ts) under these digests.
 * Pure, workflow-safe.
 */
import type { ToolResult, UnreceiptedChange } from './contracts';
import type { ToolName } from './tools';

/** A validated call as the workflow sees it; the full arguments are in the store under `ref`. */
export interface CallView {
  call_id: string;
  name: ToolName;
  /** The normalised target path of read_file / search / apply_patch, when the call has one. */
  path: string | null;
  ref: string;
  /**
   * Digest of the tool's name and canonical arguments, without the call id: two calls with the
   * same identity ask for the same thing (absent in histories from before it was added).
   */
  identity?: string;
  /** The turn whose decision proposed the call (for the trace's spans). */
  turn?: number;
  /**
   * An orchestration call's arguments the workflow acts on (a dispatch's long instruction stays in
   * the store under `ref`), and its action id: the digest of the run, the tool and the arguments.
   */
  task?: {
    action_id: string;
    args: { task_id?: string; title?: string; text?: string; reason?: string; paths?: string[]; wait?: boolean };
  };
}

/** A tool result as the workflow sees it: the full result is in the store under `ref`. */
export interface ResultView extends ToolResult {
  /** Digest of the full result, or null when `data` already is the whole of it. */
  ref: string | null;
  /** run_tests: what the test process changed in the workspace, undone (whole, as `data` holds it briefed). */
  unreceipted?: UnreceiptedChange;
  /** run_tests: the host store's digest of every test with its outcome (kept out of the result the model reads). */
  tests_ref?: string;
}

/** A decision as the workflow sees it; the raw decision is in the store under `ref`. */
export type DecisionView = (
  | { kind: 'plan' | 'final'; text: string; ref: string }
  | {
      kind: 'tool';
      ref: string;
      raw: unknown;
      call: CallView;
      invalid: null;
      /**
       * A read-only call's result, when the call was run with its decision (a replay's decision
       * asked with `read_ahead`, core/activities.ts): the run takes it instead of running the call.
       */
      ran?: ResultView;
    }
  | { kind: 'tool'; ref: string; raw: unknown; call: null; invalid: ToolResult }
) & {
  /** Digest of the provider's raw response this decision came in (several calls share one), or null for a replay. */
  reply: string | null;
};

/** A transcript entry as stored: every part by digest, except user messages. */
export type TranscriptEntry = { decision: string; result?: string; reply?: string | null } | { message: string; pinned?: true };

/** A transcript entry on its way to the store: a result the workflow made itself goes inline. */
export type PendingEntry =
  { decision: string; result?: { ref: string } | { inline: ToolResult }; reply?: string | null } | { message: string; pinned?: true };

export const BRIEF_STRING = 240;
const BRIEF_ITEMS = 8;
const BRIEF_DEPTH = 4;

/**
 * A bounded view of any JSON value: long strings keep their head and say how much is left out,
 * long arrays their first items and a count, deep nesting is cut. Used for everything a trace
 * event or an activity result shows of a tool's data.
 */
export function brief(value: unknown, depth = 0): unknown {
  if (typeof value === 'string') {
    return value.length <= BRIEF_STRING ? value : `${value.slice(0, BRIEF_STRING)}… [${value.length - BRIEF_STRING} more characters]`;
  }
  if (value === null || typeof value !== 'object') return value;
  if (depth >= BRIEF_DEPTH) return '…';
  if (Array.isArray(value)) {
    const head = value.slice(0, BRIEF_ITEMS).map((v) => brief(v, depth + 1));
    return value.length > BRIEF_ITEMS ? [...head, `… ${value.length - BRIEF_ITEMS} more`] : head;
  }
  const entries = Object.entries(value as Record<string, unknown>);
  const out: Record<string, unknown> = {};
  for (const [k, v] of entries.slice(0, 2 * BRIEF_ITEMS)) out[brief(k, depth + 1) as string] = brief(v, depth + 1);
  if (entries.length > 2 * BRIEF_ITEMS) out['…'] = `${entries.length - 2 * BRIEF_ITEMS} more fields`;
  return out;
}

/** The view of a result kept in history: its envelope whole, its data briefed. */
export function resultView(result: ToolResult, ref: string | null): ResultView {
  return { call_id: result.call_id, ok: result.ok, error: result.error, truncated: result.truncated, data: brief(result.data), ref };
}
