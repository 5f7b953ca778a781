/**
 * One reader per run, shared by every stream that follows it (events.ts). The reader asks the run
 * for its snapshot every tick (one small Query while nothing changed), reads new trace events from
 * the run's memory or the host store, fragments of the model reply being streamed from the store,
 * and keeps the newest frames in a bounded ring. Each stream pulls from the ring at its own pace;
 * a stream behind the ring reads its own pages from the sources (`backfill`), so a slow client
 * holds no memory of the others and stalls nobody.
 *
 * Hazards: the trace's seq is contiguous, so a missing event is detected (a `GapError`), never
 * skipped: events the run no longer holds in memory are only in the host store of the worker host
 * that stored them, which this console reads only when it runs with that state folder. A Query
 * is not answered while the run's worker is replaced: the reader says so as a hint, from a timer
 * that runs from the last answer (a Query waits up to 5 s, the hint does not), and keeps asking.
 * A closed run answers from its result and the store, not by a Query (that would replay it on a
 * worker).
 */
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { compareCursors, REPLY_EVENT, snapshotVersion, waitingOn, type Cursor, type Hint, type RunSnapshot } from '../../core/delivery';
import type { RunView, TaskView } from '../../core/run-view';
import { TERMINAL_STATUSES } from '../../core/contracts';
import type { TraceEvent } from '../../core/trace';
import { openStore, type Fragment, type Store } from '../../store/store';
import { isRunning, querySnapshot, queryTrace, runHandle, runOutcome, wedgedTask, type RunHandle } from '../run-access';
import { turnFragments } from '../../store/fragments';
import { replyText } from '../../store/stored-trace';

/** A frame of the run's record as the ring holds it: a trace event, or a fragment of a streamed reply. */
export type Entry = { cursor: Cursor; event: TraceEvent; text?: string } | { cursor: Cursor; fragment: Fragment };

export class GapError extends Error {
  override name = 'GapError';
}

export interface FeedOptions {
  client: Client;
  /** The state folder whose host store holds stored events and fragments; null: the run's memory only. */
  stateDir: string | null;
  /** How often the reader asks the run while anyone follows it. */
  pollMs: number;
}

/** Frames the ring keeps; a stream further behind reads its own pages. */
const RING = 1024;
/** Events read in one tick at most (the rest next tick). */
const EVENTS_PER_TICK = 1000;
/**
 * No Query answered for this long (from the last answer, or from the first ask) is a `no_worker`
 * hint: with the stream's own delay, a client has it within 2 s of a worker's death.
 */
export const NO_WORKER_MS = 1500;
/** While no worker answers, how often the server is asked whether the run's workflow task fails again and again. */
const WEDGE_CHECK_MS = 5000;
/** While no worker answers, how often the run is asked again. */
const NO_WORKER_POLL_MS = 1000;

interface Versioned<T> {
  version: number;
  /** The trace seq the value was read at: a stream sends it once it sent every frame up to there. */
  at: number;
  value: T;
}

export class RunFeed {
  private readonly handle: RunHandle;
  /**
   * Ends the calls under way when the reader stops (they would outlive the console's connection).
   * One per tick: the client adds a listener to it for each call and never takes it off.
   */
  private calls = new AbortController();
  private wedgeCalls: AbortController | null = null;
  private store: Store | null = null;
  private runId: string | null = null;
  /** The newest entry read, and the entries before it (at most RING). */
  private cursor: Cursor | null = null;
  private ring: Entry[] = [];
  private base: Cursor | null = null;
  private newestEvent: TraceEvent | undefined;
  run: Versioned<RunView> | null = null;
  readonly tasks = new Map<string, Versioned<TaskView> & { json: string }>();
  /** The current hint and its serial number (a stream sends each serial once). */
  hint: (Hint & { serial: number }) | null = null;
  private hintSerial = 0;
  /** Set once the run closed and every entry of it was read. */
  ended = false;
  /** Set when the feed cannot go on exactly. */
  failure: { error: 'gap' | 'unavailable'; detail: string } | null = null;
  streams = 0;
  /** Fires NO_WORKER_MS after the last answer (or the start) unless another answer comes first. */
  private unanswered: NodeJS.Timeout | null = null;
  /** When the server was last asked whether the run is wedged (0: not since the last answer). */
  private wedgeChecked = 0;
  private waiters = new Set<() => void>();
  /** Grows at every change, so a stream that looked before waiting misses none. */
  generation = 0;
  private dirty = false;
  private timer: NodeJS.Timeout | null = null;
  private ticking = false;
  private stopped = false;

  constructor(
    readonly workflowId: string,
    private readonly o: FeedOptions,
  ) {
    this.handle = runHandle(o.client, workflowId);
  }

  /** Starts reading (again); idempotent. */
  start(): void {
    if (this.timer !== null || this.ended || this.failure || this.stopped) return;
    if (this.unanswered === null) this.answered(false);
    const loop = async () => {
      await this.tick();
      // While no worker answers, asked less often: a wedged run's every Query is a replay that fails.
      const wait = this.hint?.hint !== 'no_worker' ? this.o.pollMs : this.hint.wedged ? WEDGE_CHECK_MS : NO_WORKER_POLL_MS;
      if (this.streams > 0 && !this.ended && !this.failure && !this.stopped) this.timer = setTimeout(() => void loop(), wait).unref();
      else this.timer = null;
    };
    this.timer = setTimeout(() => void loop(), 0).unref();
  }

  /** Stops reading for good; the store is closed once a tick under way is over. */
  stop(): void {
    this.stopped = true;
    this.calls.abort();
    this.wedgeCalls?.abort();
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (this.unanswered) clearTimeout(this.unanswered);
    if (!this.ticking) this.closeStore();
    this.wake();
  }

  private closeStore(): void {
    this.store?.close();
    this.store = null;
  }

  /** Resolves at the first change after generation `seen` (at once if there was one), or after `ms`. */
  changed(ms: number, seen: number): Promise<void> {
    if (this.generation !== seen) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.waiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.waiters.add(done);
    });
  }

  /** The newest entry read so far (null before the first tick). */
  get head(): Cursor | null {
    return this.cursor;
  }

  /** Ring entries after `c` (at most `max`), or 'behind' when `c` is older than the ring. */
  entriesAfter(c: Cursor, max: number): Entry[] | 'behind' {
    if (this.base === null || compareCursors(c, this.base) < 0) return this.base === null ? [] : 'behind';
    const out: Entry[] = [];
    for (const e of this.ring) {
      if (compareCursors(e.cursor, c) <= 0) continue;
      out.push(e);
      if (out.length >= max) break;
    }
    return out;
  }

  /** Trace events after `c` read from the sources (a stream behind the ring); fragments of past replies are not re-sent. */
  async backfill(c: Cursor, max: number): Promise<Entry[]> {
    const events = await this.readEvents(c.seq, max);
    return events.map((event) => this.eventEntry(event));
  }

  private wake(): void {
    this.generation++;
    for (const w of [...this.waiters]) w();
  }

  private async tick(): Promise<void> {
    if (this.ticking) return;
    this.ticking = true;
    this.calls = new AbortController();
    try {
      await this.o.client.withAbortSignal(this.calls.signal, () => this.read());
    } catch (err) {
      if (err instanceof GapError) this.failure = { error: 'gap', detail: err.message };
      else if (err instanceof WorkflowNotFoundError) this.failure = { error: 'unavailable', detail: `there is no run ${this.workflowId}` };
      // Anything else is a Query no worker answered: the timer of `answered` says so, and why.
      else if (this.hint?.hint === 'no_worker' && Date.now() - this.wedgeChecked >= WEDGE_CHECK_MS) void this.lookForWedge();
    } finally {
      this.ticking = false;
      if (this.stopped) this.closeStore();
      // Only a change wakes the streams (a tick that found nothing new costs them nothing).
      if (this.dirty || this.stopped || this.ended || this.failure) this.wake();
      this.dirty = false;
    }
  }

  private async read(): Promise<void> {
    // Asking a closed run's Query would replay its whole history on a worker: a run first read, or
    // one that recorded its end, is asked whether it still runs first.
    if ((this.cursor === null || this.newestEvent?.type === 'run_finished') && !(await isRunning(this.handle))) return this.readClosed();
    let snap: RunSnapshot;
    try {
      snap = await querySnapshot(this.handle, this.run?.version);
    } catch (err) {
      if (!(await isRunning(this.handle))) return this.readClosed();
      throw err;
    }
    this.answered(true);
    this.runId ??= snap.view?.run_id ?? this.run?.value.run_id ?? null;
    if (this.cursor === null) await this.begin(snap);
    if (snap.newest > this.cursor!.seq) {
      this.readFragments();
      for (const e of await this.readEvents(this.cursor!.seq, EVENTS_PER_TICK)) this.push(this.eventEntry(e));
    }
    this.readFragments();
    if (snap.view) this.setRun(snap.version, snap.newest, snap.view);
    this.setHint(this.waiting());
    if (snap.view && TERMINAL_STATUSES.has(snap.view.status) && !(await isRunning(this.handle))) await this.readClosed();
  }

  /** The first tick: the ring starts at the run's newest event (streams behind it backfill). */
  private async begin(snap: Pick<RunSnapshot, 'newest'>, closed = false): Promise<void> {
    if (!closed && snap.newest > 0) this.newestEvent = (await queryTrace(this.handle, { tail: 1 })).events.at(-1);
    const at = { seq: snap.newest, sub: 0 };
    this.cursor = at;
    this.base = at;
  }

  /** The run closed: the rest of its trace from the store, its final state from its result. */
  private async readClosed(): Promise<void> {
    const outcome = await runOutcome(this.handle);
    this.runId = outcome.trace.run_id;
    // Followed from its close on: streams read what they need from the store themselves.
    if (this.cursor === null) await this.begin({ newest: outcome.trace.events }, true);
    while (this.cursor!.seq < outcome.trace.events) {
      const events = await this.readEvents(this.cursor!.seq, EVENTS_PER_TICK, true);
      if (events.length === 0) throw new GapError(`events after ${this.cursor!.seq} of the closed run are in no store this console reads`);
      for (const e of events) this.push(this.eventEntry(e));
    }
    const view = outcome.state;
    this.setRun(snapshotVersion(outcome.trace.events, view.segment, 'final'), outcome.trace.events, view);
    this.setHint(null);
    this.ended = true;
  }

  /**
   * At most `max` events after `after`, contiguous: from the run's memory, or from the host store
   * for those it no longer holds (a closed run: the store only).
   */
  private async readEvents(after: number, max: number, closed = false): Promise<TraceEvent[]> {
    let events: TraceEvent[];
    if (closed || this.ended) events = this.stored(after, max);
    else {
      const page = await queryTrace(this.handle, { after, limit: Math.min(max, 200) });
      // The run's memory begins after `after`, or holds nothing at all (a segment that continued
      // as new and added no event yet): what comes first is in the host store only.
      const memory = page.oldest ?? page.newest + 1;
      events = memory > after + 1 ? this.stored(after, max).filter((e) => e.seq < memory) : page.events;
      if (events.length === 0 && page.newest > after)
        throw new GapError(
          `events ${after + 1} to ${memory - 1} are no longer in the run's memory, and this console reads no host store that holds them (run it on the worker's host, with its state folder)`,
        );
    }
    events.forEach((e, i) => {
      if (e.seq !== after + 1 + i) throw new GapError(`event ${after + 1 + i} is missing: the store holds ${e.seq} next`);
    });
    return events;
  }

  private stored(after: number, max: number): TraceEvent[] {
    const store = this.openedStore();
    return store !== null && this.runId !== null ? store.traceAfter(this.runId, after, max) : [];
  }

  private openedStore(): Store | null {
    if (this.store === null && this.o.stateDir !== null && !this.stopped) this.store = openStore(this.o.stateDir);
    return this.store;
  }

  private eventEntry(event: TraceEvent): Entry {
    const store = this.openedStore();
    const text = event.type === REPLY_EVENT && store !== null ? replyText(store, event) : undefined;
    return { cursor: { seq: event.seq, sub: 0 }, event, ...(text !== undefined ? { text } : {}) };
  }

  /**
   * Fragments of the reply being streamed (the newest event is its request) not read yet: those of
   * its turn, each at the cursor `<request's seq>.<n>` (store/fragments.ts).
   */
  private readFragments(): void {
    const request = this.newestEvent;
    const store = this.openedStore();
    if (request?.type !== 'model_requested' || store === null || this.runId === null) return;
    const turn = (request.data as { turn?: number }).turn ?? 0;
    const after = this.cursor!.seq === request.seq ? this.cursor!.sub : 0;
    for (const fragment of turnFragments(store, this.runId, turn, after))
      this.push({ cursor: { seq: request.seq, sub: fragment.index }, fragment });
  }

  private push(entry: Entry): void {
    this.dirty = true;
    this.ring.push(entry);
    this.cursor = entry.cursor;
    if ('event' in entry) this.newestEvent = entry.event;
    if (this.ring.length > RING) this.base = this.ring.splice(0, this.ring.length - RING).at(-1)!.cursor;
  }

  private setRun(version: number, at: number, view: RunView): void {
    if (this.run !== null && this.run.version >= version) return;
    this.run = { version, at, value: view };
    this.dirty = true;
    for (const task of view.subruns?.tasks ?? []) {
      const json = JSON.stringify(task);
      if (this.tasks.get(task.task_id)?.json !== json) this.tasks.set(task.task_id, { version, at, value: task, json });
    }
  }

  private waiting(): Hint | null {
    const on = waitingOn(this.newestEvent);
    return on === null ? null : { hint: 'waiting', on, since: this.newestEvent!.seq };
  }

  private setHint(h: Hint | null): void {
    const same =
      h !== null &&
      this.hint !== null &&
      h.hint === this.hint.hint &&
      h.on === this.hint.on &&
      h.since === this.hint.since &&
      JSON.stringify(h.wedged) === JSON.stringify(this.hint.wedged);
    if (same || (h === null && this.hint === null)) return;
    this.hint = h === null ? null : { ...h, serial: ++this.hintSerial };
    this.dirty = true;
  }

  /**
   * A worker answered for the run (`answer`), or the reader starts: the `no_worker` hint ends, and
   * comes again NO_WORKER_MS from now unless another answer comes first. A worker that died after
   * its last answer is so named at most NO_WORKER_MS after its death; one busy that long (a long
   * history replayed, a workflow task held by a slow step) is named too, until it answers.
   */
  private answered(answer: boolean): void {
    if (answer && this.hint?.hint === 'no_worker') this.setHint(null);
    if (answer) this.wedgeChecked = 0;
    if (this.unanswered) clearTimeout(this.unanswered);
    this.unanswered = setTimeout(() => {
      this.unanswered = null;
      if (this.ended || this.failure || this.stopped) return;
      this.setHint({ hint: 'no_worker', since: this.cursor?.seq ?? 0 });
      this.wake();
      void this.lookForWedge();
    }, NO_WORKER_MS).unref();
  }

  /** Asks the server whether the run's workflow task fails again and again; the `no_worker` hint then says so. */
  private async lookForWedge(): Promise<void> {
    this.wedgeChecked = Date.now();
    const calls = new AbortController();
    this.wedgeCalls = calls;
    const w = await this.o.client.withAbortSignal(calls.signal, () => wedgedTask(this.handle)).catch(() => null);
    if (w === null || this.hint?.hint !== 'no_worker' || this.ended || this.stopped) return;
    const { nondeterminism, build, error, attempt } = w;
    this.setHint({ hint: 'no_worker', since: this.hint.since, wedged: { nondeterminism, build, error, attempt } });
    this.wake();
  }
}

/** The feeds of the runs being followed, one each, made on the first stream and dropped after the last. */
export class Feeds {
  private readonly feeds = new Map<string, RunFeed>();
  private readonly linger = new Map<string, NodeJS.Timeout>();

  constructor(
    private readonly o: FeedOptions,
    private readonly most: number,
  ) {}

  get size(): number {
    return this.feeds.size;
  }

  /** The feed of run `workflowId`, counted as followed once more; null when the console follows too many runs. */
  acquire(workflowId: string): RunFeed | null {
    let feed = this.feeds.get(workflowId);
    if (feed === undefined) {
      if (this.feeds.size >= this.most) return null;
      feed = new RunFeed(workflowId, this.o);
      this.feeds.set(workflowId, feed);
    }
    clearTimeout(this.linger.get(workflowId));
    this.linger.delete(workflowId);
    feed.streams++;
    feed.start();
    return feed;
  }

  /** One stream fewer; a feed nobody follows for a few seconds is dropped (a reconnect in between keeps it). */
  release(feed: RunFeed): void {
    feed.streams--;
    if (feed.streams > 0) return;
    this.linger.set(
      feed.workflowId,
      setTimeout(() => {
        this.linger.delete(feed.workflowId);
        if (feed.streams > 0) return;
        feed.stop();
        this.feeds.delete(feed.workflowId);
      }, 5000).unref(),
    );
  }

  close(): void {
    for (const t of this.linger.values()) clearTimeout(t);
    for (const f of this.feeds.values()) f.stop();
    this.feeds.clear();
  }
}
