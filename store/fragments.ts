/**
 * A live reply's text as it streams: written into the host store by the decide activity as it
 * arrives (`FragmentWriter`), read back by the console for clients that show it before the turn
 * ends (`turnFragments`). The table and its SQL are store.ts's (`fragments`).
 *
 * One key and one numbering, the ones of the event stream's fragment frames (docs/delivery.md,
 * "Frame ids and resuming"): a reply's fragments are keyed by their run and turn, and numbered
 * n = 1, 2, ... over every stream of the turn. A frame's id is `<seq>.<n>`, with the seq of the
 * turn's `model_requested` event, which the console writes and a client resumes from.
 *
 * A little is gathered before each write (one store commit per write), and a stream's fragments
 * are bounded: past the bound they are not kept (a client then waits for the turn's end, whose
 * text is the authoritative one).
 *
 * Hazards: a worker killed mid-reply loses what it had not written yet; a request asked again (a
 * retried activity, a retry of the turn) writes a new stream of the same turn, so a reader keeps
 * the fragments of a turn's newest stream only. Fragments may be lost; the turn's end has the
 * whole text.
 */
import type { Fragment, Store } from './store';

/** Characters gathered before they are written, at most. */
export const FRAGMENT_FLUSH_CHARS = 2048;
/** How long text waits to be written, at most. */
export const FRAGMENT_FLUSH_MS = 100;
/** Characters of one stream kept in the store, at most. */
export const MAX_STREAM_FRAGMENT_CHARS = 256 * 1024;

/** Writes the text of one request's reply as fragments of the run's turn, under a stream of its own. */
export class FragmentWriter {
  private pending = '';
  private timer: NodeJS.Timeout | null = null;
  private stream: number | null = null;
  private kept = 0;

  constructor(
    private readonly store: Store,
    private readonly runId: string,
    private readonly turn: number,
  ) {}

  /** A piece of the reply's text as it arrived. */
  readonly push = (text: string): void => {
    if (this.kept + this.pending.length >= MAX_STREAM_FRAGMENT_CHARS) return;
    this.pending += text.slice(0, MAX_STREAM_FRAGMENT_CHARS - this.kept - this.pending.length);
    if (this.pending.length >= FRAGMENT_FLUSH_CHARS) this.flush();
    else this.timer ??= setTimeout(() => this.flush(), FRAGMENT_FLUSH_MS);
  };

  /** Writes what is gathered; the stream's number is taken at its first write. */
  flush(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    if (this.pending === '') return;
    const text = this.pending;
    this.pending = '';
    try {
      this.stream ??= this.store.nextFragmentStream(this.runId, this.turn);
      this.store.appendFragment(this.runId, this.turn, this.stream, text);
      this.kept += text.length;
    } catch {
      // Fragments may be lost, and a store too busy for them must not fail the reply (this runs on
      // a timer, where a throw would end the worker): this stream keeps no more.
      this.kept = MAX_STREAM_FRAGMENT_CHARS;
    }
  }
}

/**
 * The fragments of a run's turn after the `after`-th (0: from the first), of the newest stream
 * among those read, each with its n; rows of older streams are left out.
 */
export function turnFragments(store: Store, runId: string, turn: number, after: number): Fragment[] {
  const rows = store.fragmentsAfter(runId, { turn, index: after }).filter((f) => f.turn === turn);
  const newest = rows.reduce((m, f) => Math.max(m, f.stream), 0);
  return rows.filter((f) => f.stream === newest);
}
