/**
 * The delivery contract of a run's event stream (docs/delivery.md): frame types and their classes
 * and versions, frame ids, entity versions, and how each trace event becomes a frame. Pure: the
 * console's stream (client/console/) and every client that reads it share these rules.
 *
 * Hazards: an id must order every frame of a run across continue-as-new and worker changes, so it
 * is derived from the trace's `seq` (assigned by the workflow, strictly increasing across
 * segments) and never from a reader's own counter; a fragment's id from the seq of the request it
 * streams. Entity versions must grow with every change whichever console reads them, so they come
 * from the workflow too (`snapshotVersion`).
 */
import { z } from 'zod';
import { MESSAGE_ID } from './contracts';
import { matching } from './patterns';
import type { RunView, TaskView } from './run-view';
import type { TraceEvent } from './trace';

/** The frame classes of the source's delivery chapter. */
export type FrameClass = 'conversation' | 'entity' | 'card' | 'hint' | 'control';

/** Every frame type, the version that introduced it, and its class. */
export const FRAME_TYPES = {
  /** A trace event that is no card: the run's conversation and its steps. */
  trace: { version: 1, class: 'conversation' },
  /** An approval request, its resolution, or an approval the run ignored. */
  card: { version: 1, class: 'card' },
  /** The run's state as a whole snapshot. */
  run: { version: 1, class: 'entity' },
  /** The run ended and every frame of it was sent; the server closes the stream after it. */
  end: { version: 1, class: 'control' },
  /** The stream cannot go on exactly (frames it would have to skip); the server closes it. */
  fault: { version: 1, class: 'control' },
  /** One task of an orchestrating run, as a whole snapshot. */
  task: { version: 2, class: 'entity' },
  /** What the run waits for now; never stored, never replayed. */
  hint: { version: 2, class: 'hint' },
  /** A piece of a model reply as it streams; may be lost. */
  fragment: { version: 2, class: 'conversation' },
  /** A model reply's whole text, keyed by its turn. */
  turn_end: { version: 2, class: 'conversation' },
} as const satisfies Record<string, { version: number; class: FrameClass }>;

export type FrameType = keyof typeof FRAME_TYPES;

/** The newest frame version this build speaks; a client declares the newest it understands. */
export const FRAME_VERSION = 2;

/**
 * The trace event that carries a model reply's authoritative text, keyed by turn (`{turn, text,
 * text_ref?}`); a run recorded before it has none.
 */
export const REPLY_EVENT = 'model_replied';

// ---- ids ----

/** A position in a run's frames: after trace event `seq`, and after fragment `sub` of it (0: none). */
export interface Cursor {
  seq: number;
  sub: number;
}

export const START: Cursor = { seq: 0, sub: 0 };

const CURSOR = /^(0|[1-9]\d{0,14})(?:\.([1-9]\d{0,8}))?$/;

/** `12` or `12.3` as a cursor; null for anything else. */
export function parseCursor(text: string): Cursor | null {
  const m = CURSOR.exec(text.trim());
  return m ? { seq: Number(m[1]), sub: m[2] ? Number(m[2]) : 0 } : null;
}

export const formatCursor = (c: Cursor): string => (c.sub === 0 ? String(c.seq) : `${c.seq}.${c.sub}`);

/** Negative when `a` comes before `b`. */
export const compareCursors = (a: Cursor, b: Cursor): number => a.seq - b.seq || a.sub - b.sub;

// ---- entity versions ----

/**
 * The version of a run's snapshot: it grows with every trace event, every continue-as-new and
 * every workflow task, in that order of weight, so two different states never share one across
 * consoles, restarts or workers. `history_length` is the segment's history length at its last
 * workflow task (a Query does not change it); a closed run's final state is `final`.
 */
export function snapshotVersion(newest: number, segment: number, historyLength: number | 'final'): number {
  const within = historyLength === 'final' ? 999_999 : Math.min(historyLength, 999_998);
  return newest * 1_000_000_000 + Math.min(segment, 999) * 1_000_000 + within;
}

/** What the `snapshot` Query answers: the state, unless it is the version the caller already has. */
export interface RunSnapshot {
  version: number;
  /** The newest trace event's seq (0: none yet). */
  newest: number;
  /** The oldest event the run holds in memory (older ones are in the host store only); null when none. */
  oldest: number | null;
  view: RunView | null;
}

export interface SnapshotRequest {
  /** The version the caller has: the answer's `view` is null when it is still current. */
  since?: number;
}

// ---- frames ----

/** An approval card as a frame carries it. */
export interface ApprovalCard {
  card: 'approval';
  action_id: string;
  call_id: string | null;
  /** `requested`; `approved` and `rejected` resolve it; `ignored`: an approval the run did not take (it stays pending). */
  state: 'requested' | 'approved' | 'rejected' | 'ignored';
  path?: string;
  before?: string;
  after?: string;
  args_digest?: string;
  workspace_digest?: string;
  /** Characters of the diff the action carries (cut for display at 32 KiB). */
  diff_bytes?: number;
  /** Where the whole diff is read, while the action is pending (the console's API). */
  diff_url?: string;
  principal?: string | null;
  reason?: string | null;
}

/** A frame's body (the SSE `data:` line): its version, type, class and id, and what its type carries. */
export type Frame = { v: number; type: FrameType; class: FrameClass; id: string } & Record<string, unknown>;

function frame(type: FrameType, id: string, body: Record<string, unknown>): Frame {
  return { v: FRAME_TYPES[type].version, type, class: FRAME_TYPES[type].class, id, ...body };
}

/** The address of the whole diff of an action pending in run `workflowId` (the console's API). */
export const diffUrl = (workflowId: string, a: { action_id: string; args_digest: string; workspace_digest: string }) =>
  `/api/runs/${encodeURIComponent(workflowId)}/diff?${new URLSearchParams({ action_id: a.action_id, args_digest: a.args_digest, workspace_digest: a.workspace_digest })}`;

const text = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);

function approvalCard(workflowId: string, e: TraceEvent): ApprovalCard | null {
  const d = (e.data ?? {}) as Record<string, unknown>;
  const base = { card: 'approval' as const, action_id: e.action_id ?? '', call_id: e.call_id ?? null };
  switch (e.type) {
    case 'approval_requested': {
      const digests = {
        action_id: base.action_id,
        args_digest: text(d.args_digest) ?? '',
        workspace_digest: text(d.workspace_digest) ?? '',
      };
      return {
        ...base,
        state: 'requested',
        path: text(d.path),
        before: text(d.before),
        after: text(d.after),
        args_digest: digests.args_digest,
        workspace_digest: digests.workspace_digest,
        diff_bytes: typeof d.diff_bytes === 'number' ? d.diff_bytes : undefined,
        diff_url: diffUrl(workflowId, digests),
      };
    }
    case 'approval_recorded':
      return {
        ...base,
        state: d.decision === 'approve' ? 'approved' : 'rejected',
        principal: text(d.principal) ?? null,
        reason: text(d.reason) ?? null,
      };
    case 'approval_ignored':
      return { ...base, state: 'ignored', reason: text(d.reason) ?? null };
    default:
      return null;
  }
}

/**
 * The frame of trace event `e` for a client of frame version `version`: a card for the approval
 * events, `turn_end` for a model reply (a plain `trace` frame below version 2), else `trace`.
 * Every one carries the event whole, so a client's frames put together are the run's trace.
 * `text` is the reply's whole text when the event holds only a reference to it.
 */
export function eventFrame(workflowId: string, e: TraceEvent, version: number, wholeText?: string): Frame {
  const id = String(e.seq);
  const card = approvalCard(workflowId, e);
  if (card !== null) return frame('card', id, { ...card, event: e });
  if (e.type === REPLY_EVENT && version >= FRAME_TYPES.turn_end.version) {
    const d = (e.data ?? {}) as Record<string, unknown>;
    return frame('turn_end', id, { turn: d.turn, text: wholeText ?? text(d.text) ?? '', event: e });
  }
  return frame('trace', id, { event: e });
}

/**
 * A fragment of the reply to the request traced at `requestSeq`: its `index` from 1 within the
 * turn, and its `stream` (a request asked again streams anew: a client shows a turn's latest stream).
 */
export const fragmentFrame = (requestSeq: number, f: { turn: number; index: number; stream: number; text: string }): Frame =>
  frame('fragment', formatCursor({ seq: requestSeq, sub: f.index }), { turn: f.turn, index: f.index, stream: f.stream, text: f.text });

export const runFrame = (id: string, version: number, view: RunView): Frame => frame('run', id, { version, run: view });

export const taskFrame = (id: string, version: number, task: TaskView): Frame => frame('task', id, { version, task });

export const endFrame = (id: string, view: RunView): Frame =>
  frame('end', id, { status: view.status, reason: view.reason, run_id: view.run_id });

export const faultFrame = (id: string, fault: 'gap' | 'unavailable', detail: string): Frame => frame('fault', id, { fault, detail });

/** What a run waits on, as a hint says it. */
export type Waiting = 'model' | 'approval' | 'tests' | 'verification' | 'setup' | 'budget';

export interface Hint {
  hint: 'waiting' | 'no_worker';
  on?: Waiting;
  /** The trace event the hint is about. */
  since: number;
  /**
   * With `no_worker`: why no worker answers, when the server says the run's workflow task fails
   * again and again (a worker's code cannot replay its history): the failing worker's build, the
   * error and the attempt. The run stays as it is until an operator acts (docs/failures.md).
   */
  wedged?: { nondeterminism: boolean; build: string | null; error: string; attempt: number };
}

export const hintFrame = (id: string, h: Hint): Frame => frame('hint', id, { ...h });

/** What a run whose newest trace event is `e` waits on, if it waits on something that takes time. */
export function waitingOn(e: TraceEvent | undefined): Waiting | null {
  switch (e?.type) {
    case 'model_requested':
    case 'model_retry':
      return 'model';
    case 'approval_requested':
      return 'approval';
    case 'verification_started':
      return 'verification';
    case 'setup_started':
    case 'setup_command':
      return 'setup';
    case 'budget_wait':
      return 'budget';
    case 'tool_proposed': {
      const call = (e.data as { call?: { name?: unknown } } | null)?.call;
      return call?.name === 'run_tests' ? 'tests' : null;
    }
    default:
      return null;
  }
}

/** Whether a client of frame version `version` is sent frames of type `type`. */
export const understands = (version: number, type: FrameType): boolean => FRAME_TYPES[type].version <= version;

// ---- actions ----

/** A client's idempotency id: the same id with the same request answers the first outcome. */
export const IDEMPOTENCY_ID = matching(/^[A-Za-z0-9_.:-]{1,64}$/, 'id: 1-64 characters of [A-Za-z0-9_.:-]');

const digest = matching(/^[0-9a-f]{64}$/, 'a lowercase hex SHA-256 digest');

/** `POST /api/runs/<id>/actions`: one action on a run. */
export const actionRequestSchema = z.discriminatedUnion('action', [
  z.strictObject({
    id: IDEMPOTENCY_ID,
    action: z.enum(['approve', 'reject']),
    action_id: digest,
    args_digest: digest,
    workspace_digest: digest,
    /** SHA-256 of the whole diff's UTF-8 text: required to approve an action whose diff was cut for display. */
    diff_sha256: digest.optional(),
    reason: z.string().min(1).max(2000).optional(),
  }),
  z.strictObject({ id: IDEMPOTENCY_ID, action: z.literal('steer'), message: z.string().min(1).max(4000) }),
  z.strictObject({ id: IDEMPOTENCY_ID, action: z.enum(['interrupt', 'stop']), reason: z.string().min(1).max(2000).optional() }),
]);
export type ActionRequest = z.infer<typeof actionRequestSchema>;

/** What an action came to: the answer of its first request, repeated to every repeat. */
export interface ActionOutcome {
  id: string;
  action: ActionRequest['action'];
  /**
   * `approved`/`rejected`: the run recorded the decision; `ignored`: the run did not take it (see
   * `detail`); `unconfirmed`: sent, but the run did not confirm it in time; `sent`: the Signal
   * (or the cancellation of the run) was accepted.
   */
  outcome: 'approved' | 'rejected' | 'ignored' | 'unconfirmed' | 'sent';
  detail: string | null;
  /** The trace event that confirmed it, when one did. */
  seq: number | null;
}

/** The Signal's message id of an action: the same principal, run and idempotency id give the same one. */
export const actionMessageId = (digestOfKey: string) => MESSAGE_ID.parse(`api/${digestOfKey.slice(0, 48)}`);
