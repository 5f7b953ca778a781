/**
 * A run's trace as the command line shows it: the events stored in the worker host's store
 * (everything of finished runs and of earlier segments), merged with the events the running
 * segment still holds (by query). `--full` resolves the digests in events to the stored contents.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Store } from '../store/store';
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
  if (e.type === 'verification_passed' || e.type === 'verification_failed' || e.type === 'baseline_tests') return withTests(store, e);
  const ref = typeof data?.ref === 'string' && store.has(data.ref) ? data.ref : null;
  if (ref === null) return e;
  const stored = store.get<Record<string, unknown>>(ref);
  switch (e.type) {
    case 'tool_observed': {
      // A test run's every test is kept apart from its result.
      const testsRef = (data as { tests_ref?: unknown }).tests_ref;
      const tests = typeof testsRef === 'string' && store.has(testsRef) ? store.get(testsRef) : undefined;
      const result = stored as { data?: object | null };
      return { ...e, data: tests ? { ...stored, data: { ...result.data, tests }, ref } : { ...stored, ref } };
    }
    case 'tool_proposed':
      return { ...e, data: { call: stored.call, ref } };
    case 'plan_recorded':
      return { ...e, data: { text: stored.text, ref } };
    default:
      return e;
  }
}

/** A verification's or base run's events with every test at the base and at the end, each with its outcome. */
function withTests(store: Store, e: TraceEvent): TraceEvent {
  const resolve = (ref: unknown) => (typeof ref === 'string' && store.has(ref) ? store.get(ref) : undefined);
  const data = e.data as {
    tests_ref?: unknown;
    candidate_tests?: { tests_ref?: unknown };
    verdict?: { base?: { tests_ref?: unknown } | null };
    acceptance?: { tests_ref?: unknown } | null;
  };
  if (e.type === 'baseline_tests') {
    const tests = resolve(data.tests_ref);
    return tests ? { ...e, data: { ...data, tests } } : e;
  }
  const end = resolve(data.candidate_tests?.tests_ref);
  const base = resolve(data.verdict?.base?.tests_ref);
  const cases = resolve(data.acceptance?.tests_ref);
  return {
    ...e,
    data: {
      ...data,
      ...(base ? { tests_at_base: base } : {}),
      ...(end ? { tests_at_end: end } : {}),
      ...(cases ? { acceptance_cases: cases } : {}),
    },
  };
}

/** The whole stored trace of a run, resolved when `full`. */
export function storedTrace(store: Store, runId: string, full = false): TraceEvent[] {
  const events = store.trace(runId);
  return full ? events.map((e) => fullEvent(store, e)) : events;
}
