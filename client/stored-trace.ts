/**
 * A run's trace as the command line shows it: the events stored in the worker host's store
 * (everything of finished runs and of earlier segments), merged with the events the running
 * segment still holds (by query). `--full` resolves the digests in events to the stored contents.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Store } from '../host/store';
import type { TraceEvent } from '../core/trace';

export function openStore(stateDir: string): Store | null {
  const file = join(stateDir, 'store.sqlite');
  return existsSync(file) ? new Store(file) : null;
}

/** Events by seq: stored ones, then the live ones (which win: they are the same events). */
export function mergeTrace(stored: TraceEvent[], live: TraceEvent[]): TraceEvent[] {
  const bySeq = new Map<number, TraceEvent>();
  for (const e of [...stored, ...live]) bySeq.set(e.seq, e);
  return [...bySeq.values()].sort((a, b) => a.seq - b.seq);
}

/**
 * The event with its references resolved: a tool result becomes the full result, a proposal the
 * whole call, a plan or final text the whole text. Unresolvable references are left as they are.
 */
export function fullEvent(store: Store, e: TraceEvent): TraceEvent {
  const data = e.data as { ref?: unknown } | null;
  const ref = typeof data?.ref === 'string' && store.has(data.ref) ? data.ref : null;
  if (ref === null) return e;
  const stored = store.get<Record<string, unknown>>(ref);
  switch (e.type) {
    case 'tool_observed':
      return { ...e, data: { ...stored, ref } };
    case 'tool_proposed':
      return { ...e, data: { call: stored.call, ref } };
    case 'plan_recorded':
      return { ...e, data: { text: stored.text, ref } };
    default:
      return e;
  }
}

/** The whole stored trace of a run, resolved when `full`. */
export function storedTrace(store: Store, runId: string, full = false): TraceEvent[] {
  const events = store.trace(runId);
  return full ? events.map((e) => fullEvent(store, e)) : events;
}
