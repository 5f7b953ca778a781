/**
 * A run's trace as the host store holds it (everything of finished runs and of earlier segments),
 * read for the command line and the console: `--full` resolves the digests in events to the
 * stored contents, and a reply event's whole text is read from the decision it names. Merging
 * these with the events a running segment still holds is the client's (client/commands/shared.ts).
 */
import type { Store } from './store';
import type { TraceEvent } from '../core/trace';

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

/** The whole text of a reply event (its `text_ref` names the stored decision); undefined when the store does not hold it. */
export function replyText(store: Store, event: TraceEvent): string | undefined {
  const ref = (event.data as { text_ref?: unknown } | null)?.text_ref;
  if (typeof ref !== 'string' || !store.has(ref)) return undefined;
  const decision = store.get<unknown>(ref);
  const text = typeof decision === 'object' && decision !== null ? (decision as { text?: unknown }).text : decision;
  return typeof text === 'string' ? text : undefined;
}
