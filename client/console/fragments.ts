/**
 * What the event stream reads of a model reply from the host store: the fragments of the reply
 * being streamed (written by the decide activity as text arrives, models/fragments.ts) and the
 * whole text of a reply whose trace event holds only a reference to it.
 *
 * Hazards: a turn's fragments come in streams (each request of the turn that streamed, a retried
 * activity too, is a new one); only the newest stream seen is passed on, and a client shows the
 * latest stream's text of a turn. Fragments may be lost; the turn-end frame's text is the truth.
 */
import type { TraceEvent } from '../../core/trace';
import type { Store } from '../../store/store';

/**
 * Fragments of the request traced at `request` (its turn) after index `after` of this stream's
 * numbering (1-based: the id's part after the dot), each with that index; rows of streams older
 * than the newest one read are left out.
 */
export function fragmentsAfter(
  store: Store,
  runId: string,
  request: { seq: number; turn: number },
  after: number,
): { index: number; stream: number; text: string }[] {
  const rows = store.fragmentsAfter(runId, { turn: request.turn, index: after - 1 }).filter((f) => f.turn === request.turn);
  const newest = rows.reduce((m, f) => Math.max(m, f.stream), 0);
  return rows.filter((f) => f.stream === newest).map((f) => ({ index: f.index + 1, stream: f.stream, text: f.text }));
}

/** The whole text of a reply event (its `text_ref` names the stored decision); undefined when the store does not hold it. */
export function replyText(store: Store, event: TraceEvent): string | undefined {
  const ref = (event.data as { text_ref?: unknown } | null)?.text_ref;
  if (typeof ref !== 'string' || !store.has(ref)) return undefined;
  const decision = store.get<unknown>(ref);
  const text = typeof decision === 'object' && decision !== null ? (decision as { text?: unknown }).text : decision;
  return typeof text === 'string' ? text : undefined;
}
