/**
 * Following a run from the terminal: each trace event printed as it happens, and, for an
 * interactive approver, each pending write shown with its path, diff and digests and a y/N prompt.
 */
import { createInterface } from 'node:readline';
import type { RunRecord } from '../core/contracts';
import { FRAME_VERSION } from '../core/delivery';
import type { PendingApproval, RunView } from '../core/run-view';
import type { TraceEvent } from '../core/trace';
import { describeEvent, describePending } from './describe';
import { runFrames, StreamLost, type ConsoleLink } from './event-stream';
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

export interface FollowOptions {
  interactive: boolean;
  principal: string;
  log: (line: string) => void;
  pollMs?: number;
  /** The run's stored trace (host store), for the events the run no longer holds. */
  stored?: (runId: string) => TraceEvent[];
  /** A console serving this state folder: the run is followed through its event stream while it answers. */
  console?: ConsoleLink | null;
  /** Where a model reply's text goes as it streams (only through a console); none: not shown. */
  text?: (piece: string) => void;
  /** Events up to this seq are not printed (default 0: all of them). */
  after?: number;
}

/**
 * Follows a run to its end. Events go to `log` (stderr with --json). Returns the run's record.
 * With `interactive`, pending approvals are asked at the terminal and signalled. Through a
 * console's event stream when one is given and answers; otherwise (or once it stops answering) the
 * trace is read page by page after the last event printed, and events the run no longer holds in
 * memory come from the host store (`stored`).
 */
export async function followRun(handle: RunHandle, opts: FollowOptions): Promise<RunRecord> {
  const printer = new Printer(opts.log, opts.after ?? 0);
  if (opts.console) {
    try {
      return await followStream(handle, opts.console, opts, printer);
    } catch (err) {
      if (!(err instanceof StreamLost)) throw err;
      opts.log(`(${err.message}; reading the run directly)`);
    }
  }
  return pollRun(handle, opts, printer);
}

/** Prints each event once, in order. */
class Printer {
  constructor(
    private readonly log: (line: string) => void,
    /** The highest seq printed. */
    public printed: number,
  ) {}

  print(events: TraceEvent[]): void {
    for (const e of events) {
      if (e.seq <= this.printed) continue;
      this.log(describeEvent(e));
      this.printed = e.seq;
    }
  }
}

/** Asks at the terminal about `pending` once, and signals the answer. */
async function askApproval(handle: RunHandle, pending: PendingApproval, opts: FollowOptions): Promise<void> {
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

/** Follows through the console's stream: events as frames, the run's snapshots for approvals, streamed text. */
async function followStream(handle: RunHandle, link: ConsoleLink, opts: FollowOptions, printer: Printer): Promise<RunRecord> {
  opts.log(`(following through the console at ${link.url})`);
  let asked: string | null = null;
  let streaming = false;
  for await (const f of runFrames(link, handle.workflowId, { after: String(printer.printed), version: FRAME_VERSION })) {
    const event = (f as { event?: TraceEvent }).event;
    if (event !== undefined) {
      if (streaming) opts.text?.('\n');
      streaming = false;
      printer.print([event]);
    } else if (f.type === 'fragment' && opts.text) {
      opts.text(String(f.text));
      streaming = true;
    } else if (f.type === 'run' && opts.interactive) {
      const view = f.run as RunView;
      const pending = view.pending_approval;
      if (view.status === 'awaiting_approval' && pending && asked !== pending.action_id) {
        asked = pending.action_id;
        await askApproval(handle, pending, opts);
      }
    } else if (f.type === 'fault') throw new StreamLost(`the console's stream stopped: ${String(f.detail)}`);
  }
  return (await runOutcome(handle)).record;
}

/** Follows by asking the run (and the host store) every `pollMs`. */
async function pollRun(handle: RunHandle, opts: FollowOptions, printer: Printer): Promise<RunRecord> {
  let asked: string | null = null;
  let runId: string | null = null;
  const flush = async () => {
    const page = await traceSince(handle, printer.printed);
    if (page.oldest !== null && page.oldest > printer.printed + 1 && opts.stored) {
      runId ??= (await queryState(handle)).run_id;
      printer.print(opts.stored(runId));
    }
    printer.print(page.events);
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
        await askApproval(handle, pending, opts);
      }
    }
    await new Promise((r) => setTimeout(r, opts.pollMs ?? 300));
  }
  const outcome = await runOutcome(handle);
  printer.print(opts.stored?.(outcome.trace.run_id) ?? []);
  return outcome.record;
}
