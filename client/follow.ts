/**
 * Following a run from the terminal: each trace event printed as it happens, and, for an
 * interactive approver, each pending write shown with its path, diff and digests and a y/N prompt.
 */
import { createInterface } from 'node:readline';
import type { RunRecord } from '../core/contracts';
import type { TraceEvent } from '../core/trace';
import { describeEvent, describePending } from './describe';
import { approvalFor, isRunning, ORIGIN, queryState, runOutcome, sendApproval, traceSince, type RunHandle } from './run-access';

/** Asks one question at the terminal; null when standard input has ended. */
function ask(question: string): Promise<string | null> {
  return new Promise((resolve) => {
    const rl = createInterface({ input: process.stdin, output: process.stderr });
    let answered = false;
    rl.question(question, (answer) => {
      answered = true;
      rl.close();
      resolve(answer);
    });
    rl.on('close', () => {
      if (!answered) resolve(null);
    });
  });
}

export class StdinClosed extends Error {}

/** How long a follower keeps trying a run whose Queries fail, and when it first says so. */
export const QUERY_PATIENCE_MS = 60_000;
const QUERY_NOTE_MS = 5_000;

/** A failed Query's message with its cause (the client's own message is "Failed to query Workflow"). */
function queryFailure(err: unknown): string {
  const e = err as Error & { cause?: Error };
  return e.cause?.message ? `${e.message}: ${e.cause.message}` : e.message;
}

/**
 * Follows a run to its end. Events go to `log` (stderr with --json). Returns the run's record.
 * With `interactive`, pending approvals are asked at the terminal and signalled. The trace is read
 * page by page after the last event printed; events the run no longer holds in memory come from
 * the host store (`stored`).
 */
export async function followRun(
  handle: RunHandle,
  opts: {
    interactive: boolean;
    principal: string;
    log: (line: string) => void;
    pollMs?: number;
    /** The run's stored trace (host store), for the events the run no longer holds. */
    stored?: (runId: string) => TraceEvent[];
  },
): Promise<RunRecord> {
  let printed = 0; // the highest seq printed
  let asked: string | null = null;
  let runId: string | null = null;
  const print = (events: TraceEvent[]) => {
    for (const e of events) {
      if (e.seq <= printed) continue;
      opts.log(describeEvent(e));
      printed = e.seq;
    }
  };
  const flush = async () => {
    const page = await traceSince(handle, printed);
    if (page.oldest !== null && page.oldest > printed + 1 && opts.stored) {
      runId ??= (await queryState(handle)).run_id;
      print(opts.stored(runId));
    }
    print(page.events);
  };
  let unanswered: { since: number; noted: boolean } | null = null;
  while (await isRunning(handle)) {
    // A Query can fail while the run's worker is replaced or restarts (its sticky cache gone, a
    // task replaying): keep following for a while, and say so, before giving up with the cause.
    try {
      await flush();
    } catch (err) {
      const now = Date.now();
      unanswered ??= { since: now, noted: false };
      if (now - unanswered.since >= QUERY_PATIENCE_MS) {
        throw new Error(`the run's worker answered no Query for ${QUERY_PATIENCE_MS / 1000} s: ${queryFailure(err)}`);
      }
      if (!unanswered.noted && now - unanswered.since >= QUERY_NOTE_MS) {
        unanswered.noted = true;
        opts.log(`(the run's worker does not answer yet: ${queryFailure(err)}; still following)`);
      }
      await new Promise((r) => setTimeout(r, opts.pollMs ?? 300));
      continue;
    }
    unanswered = null;
    if (opts.interactive) {
      const view = await queryState(handle);
      const pending = view.pending_approval;
      if (view.status === 'awaiting_approval' && pending && asked !== pending.action_id) {
        asked = pending.action_id;
        opts.log(describePending(pending));
        const answer = await ask(`Approve this write? [y/N] `);
        if (answer === null) throw new StdinClosed(`standard input closed while action ${pending.action_id} awaits approval`);
        const yes = /^y(es)?$/i.test(answer.trim());
        const approval = approvalFor(
          pending,
          yes ? 'approve' : 'reject',
          opts.principal,
          yes ? undefined : 'rejected at the terminal',
          `${ORIGIN}:approval:${pending.action_id}`,
        );
        await sendApproval(handle, approval);
      }
    }
    await new Promise((r) => setTimeout(r, opts.pollMs ?? 300));
  }
  const outcome = await runOutcome(handle);
  print(opts.stored?.(outcome.trace.run_id) ?? []);
  return outcome.record;
}
