/**
 * Following a run from the terminal: each trace event printed as it happens, and, for an
 * interactive approver, each pending action shown with its path, diff and digests and a y/N prompt.
 */
import { createInterface } from 'node:readline';
import type { RunRecord } from '../core/contracts';
import { FRAME_VERSION } from '../core/delivery';
import type { RunView } from '../core/run-view';
import type { TraceEvent } from '../core/trace';
import { freeBytes } from '../host/disk';
import { describeEvent, describePending } from './describe';
import { runFrames, StreamLost, type ConsoleLink } from './event-stream';
import {
  approvalFor,
  ORIGIN,
  queryState,
  runOutcome,
  runProgress,
  sendApproval,
  traceSince,
  type RetriedStep,
  type RunHandle,
} from './run-access';

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

/** A failed call's message with its cause (the client's own message is "Failed to query Workflow", "Failed to describe workflow"). */
function failureText(err: unknown): string {
  const e = err as Error & { cause?: Error };
  return e.cause?.message ? `${e.message}: ${e.cause.message}` : e.message;
}

/** Less than this left on the state folder's file system: nothing there can be written (the ledger, the store, the dev server's database). */
const STATE_FULL_BELOW_BYTES = 1024 * 1024;

/**
 * What the state folder's file system shows, for a follower whose server does not answer: null
 * unless it is full. On the embedded default the dev server's database is there too.
 */
export function stateFolderDiagnosis(stateDir: string, embedded: boolean): string | null {
  let free: number;
  try {
    free = freeBytes(stateDir);
  } catch {
    return null; // not there (yet): nothing to say about it
  }
  if (free >= STATE_FULL_BELOW_BYTES) return null;
  const who = embedded
    ? 'the embedded Temporal dev server cannot write its database there, nor the worker'
    : 'a worker of this host cannot write';
  return `the state folder's file system is full (${free} bytes free): ${who} its ledger and host store; the run goes on once space is freed`;
}

/** Who did not answer the follower: the Temporal server (describe) or the run's worker (a Query). */
class NoAnswer {
  constructor(
    readonly who: 'server' | 'worker',
    readonly cause: unknown,
  ) {}
}

export interface FollowOptions {
  interactive: boolean;
  principal: string;
  log: (line: string) => void;
  pollMs?: number;
  /** The run's stored trace (host store), for the events the run no longer holds. */
  stored?: (runId: string) => TraceEvent[] | null;
  /**
   * What this machine shows when nothing answers (the state folder's file system full, say), or
   * null: named beside the server's or worker's error, and while it holds the follower waits up
   * to `diagnosedPatienceMs` rather than QUERY_PATIENCE_MS (a full disk heals once space is freed).
   */
  diagnose?: () => string | null;
  diagnosedPatienceMs?: number;
  /** A console serving this state folder: the run is followed through its event stream while it answers. */
  console?: ConsoleLink | null;
  /** Where a model reply's text goes as it streams (only through a console); none: not shown. */
  text?: (piece: string) => void;
  /** Events up to this seq are not printed (default 0: all of them). */
  after?: number;
}

/**
 * How long the follower goes on while nothing answers, what it says meanwhile, and the error it
 * ends with: the server's or worker's own error, named, with what this machine shows.
 */
class Patience {
  private since: number | null = null;
  private noted: string | null = null;

  constructor(private readonly opts: FollowOptions) {}

  reset(): void {
    this.since = null;
    this.noted = null;
  }

  async wait(no: NoAnswer): Promise<void> {
    const now = Date.now();
    this.since ??= now;
    const diagnosis = this.opts.diagnose?.() ?? null;
    const cause = `${failureText(no.cause)}${diagnosis ? `; ${diagnosis}` : ''}`;
    const limit = diagnosis ? Math.max(QUERY_PATIENCE_MS, this.opts.diagnosedPatienceMs ?? 0) : QUERY_PATIENCE_MS;
    if (now - this.since >= limit) {
      const s = Math.round(limit / 1000);
      throw new Error(
        no.who === 'worker'
          ? `the run's worker answered no Query for ${s} s: ${cause}`
          : `the Temporal server answered nothing for ${s} s: ${cause}; the run is not lost: once the server answers, \`status\` and \`trace\` show it`,
      );
    }
    const note =
      no.who === 'worker'
        ? `(the run's worker does not answer yet: ${cause}; still following)`
        : `(the Temporal server does not answer yet: ${cause}; still following)`;
    if (now - this.since >= QUERY_NOTE_MS && this.noted !== (diagnosis ?? '')) {
      this.noted = diagnosis ?? '';
      this.opts.log(note);
    }
    await new Promise((r) => setTimeout(r, this.opts.pollMs ?? 300));
  }
}

/**
 * Follows a run to its end. Events go to `log` (stderr with --json). Returns the run's record.
 * With `interactive`, pending approvals are asked at the terminal and signalled. Through a
 * console's event stream when one is given and answers; otherwise (or once it stops answering) the
 * trace is read page by page after the last event printed, and events the run no longer holds in
 * memory come from the host store (`stored`); a step that Temporal retries (a full disk waiting for
 * space, say) is said once per attempt.
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

  /** `contiguous`: stops at a gap (what is missing is printed later, from the host store), never skipping it. */
  print(events: TraceEvent[], contiguous = false): void {
    for (const e of events) {
      if (e.seq <= this.printed) continue;
      if (contiguous && e.seq !== this.printed + 1) return;
      this.log(describeEvent(e));
      this.printed = e.seq;
    }
  }
}

/** Asks at the terminal about the write `view` waits for, once per action, and signals the answer. */
async function askOnce(handle: RunHandle, view: RunView, asked: { action: string | null }, opts: FollowOptions): Promise<void> {
  const pending = view.pending_approval;
  if (view.status !== 'awaiting_approval' || !pending || asked.action === pending.action_id) return;
  asked.action = pending.action_id;
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
  const asked = { action: null as string | null };
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
      await askOnce(handle, f.run as RunView, asked, opts);
    } else if (f.type === 'fault') throw new StreamLost(`the console's stream stopped: ${String(f.detail)}`);
  }
  return (await runOutcome(handle)).record;
}

/** Follows by asking the run (and the host store) every `pollMs`. */
async function pollRun(handle: RunHandle, opts: FollowOptions, printer: Printer): Promise<RunRecord> {
  const asked = { action: null as string | null };
  let runId: string | null = null;
  const flush = async () => {
    const page = await traceSince(handle, printer.printed);
    if (page.oldest !== null && page.oldest > printer.printed + 1) {
      runId ??= (await queryState(handle)).run_id;
      const stored = opts.stored?.(runId) ?? null;
      // Without this machine's host store, what the run no longer holds cannot be printed: skipped.
      if (stored === null) return printer.print(page.events);
      printer.print(stored, true);
    }
    // Events the host store does not give yet are printed at a later poll (or from the store at
    // the run's end), never skipped for the window's newer ones.
    printer.print(page.events, true);
  };
  const patience = new Patience(opts);
  const retried = new Set<string>();
  for (;;) {
    // Either can fail while the server cannot write (a full disk) or the run's worker is replaced
    // or restarts (its sticky cache gone, a task replaying): keep following for a while, and say so.
    let running: boolean;
    try {
      const progress = await runProgress(handle).catch((err: unknown) => Promise.reject(new NoAnswer('server', err)));
      noteRetried(progress.retried, retried, opts.log);
      running = progress.running;
      if (running) await flush().catch((err: unknown) => Promise.reject(new NoAnswer('worker', err)));
    } catch (err) {
      if (!(err instanceof NoAnswer)) throw err;
      await patience.wait(err);
      continue;
    }
    patience.reset();
    if (!running) break;
    if (opts.interactive) await askOnce(handle, await queryState(handle), asked, opts);
    await new Promise((r) => setTimeout(r, opts.pollMs ?? 300));
  }
  const outcome = await runOutcome(handle);
  printer.print(opts.stored?.(outcome.trace.run_id) ?? []);
  return outcome.record;
}

/** Says once per attempt which step Temporal retries and why (a full disk says it waits for space). */
function noteRetried(steps: RetriedStep[], seen: Set<string>, log: (line: string) => void): void {
  for (const step of steps) {
    const key = `${step.activity_id}:${step.attempt}`;
    if (seen.has(key)) continue;
    seen.add(key);
    log(`(${step.activity} is retried, attempt ${step.attempt}: ${step.failure})`);
  }
}
