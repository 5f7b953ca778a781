/**
 * `GET /api/runs/<workflow id>/events`: a run's frames as Server-Sent Events (docs/delivery.md).
 * The client says where it got to (`Last-Event-ID`, or `?after=` on a first connection) and which
 * frame version it understands (`?v=` or `Frame-Version`); it gets every frame of the run's record
 * after that point exactly once, the run's and its tasks' snapshots once it caught up, hints while
 * connected, and `end` once the run closed. Each stream pulls from its run's shared feed
 * (feed.ts) at its own pace and writes only when its socket took the last write.
 *
 * Hazards: a stream outlives the request that opened it, so it ends when its session does (checked
 * without renewing it), and after `maxMs` in any case (the client reconnects, and is asked for its
 * credential again). A client that reads slowly holds at most one batch of frames here; the rest
 * waits in the feed's ring or in the store. Writing bypasses the reply hooks, so the headers that
 * every reply carries are written here.
 */
import type { ServerResponse } from 'node:http';
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import {
  compareCursors,
  endFrame,
  faultFrame,
  eventFrame,
  formatCursor,
  fragmentFrame,
  FRAME_VERSION,
  hintFrame,
  parseCursor,
  runFrame,
  START,
  taskFrame,
  understands,
  type Cursor,
  type Frame,
} from '../../core/delivery';
import { runHandle } from '../run-access';
import { json, type Access, type ApiDoor } from './access';
import { GapError, type Entry, type Feeds, type RunFeed } from './feed';

export interface StreamOptions {
  /** A comment line goes out after this long without a frame. */
  keepAliveMs: number;
  /** A stream is closed after this long (the client reconnects from where it got to). */
  maxMs: number;
  /** Streams open at once on this console, at most. */
  maxStreams: number;
}

/** Frames of one write at most, and its bytes (one frame at least). */
const BATCH_FRAMES = 200;
const BATCH_BYTES = 256 * 1024;
/** What EventSource waits before it reconnects. */
const RETRY_MS = 1000;

const HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-store',
  'content-security-policy': "default-src 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  // A buffering proxy in front would hold frames back.
  'x-accel-buffering': 'no',
};

const sse = (f: Frame) => `id: ${f.id}\nevent: ${f.type}\ndata: ${JSON.stringify(f)}\n\n`;

/** The frame version a request declares (1 when it declares none), or why it is refused. */
export function declaredVersion(req: FastifyRequest): number | string {
  const q = (req.query as Record<string, unknown>).v;
  const h = req.headers['frame-version'];
  const given = [q, h].filter((x): x is string => typeof x === 'string');
  if (given.length === 2 && given[0] !== given[1]) return `?v=${given[0]} and Frame-Version: ${given[1]} disagree`;
  if (given.length === 0) return 1;
  if (!/^[1-9]\d{0,3}$/.test(given[0])) return `a frame version is a whole number from 1, got ${JSON.stringify(given[0])}`;
  return Math.min(Number(given[0]), FRAME_VERSION);
}

/** Where a request resumes: `Last-Event-ID` (a reconnecting EventSource sends it), else `?after=`, else the start. */
export function resumeCursor(req: FastifyRequest): Cursor | string {
  const header = req.headers['last-event-id'];
  const after = (req.query as Record<string, unknown>).after;
  const given = typeof header === 'string' && header !== '' ? header : typeof after === 'string' ? after : null;
  if (given === null) return START;
  return parseCursor(given) ?? `a frame id is <seq> or <seq>.<n>, got ${JSON.stringify(given.slice(0, 40))}`;
}

export function eventsRoute(app: FastifyInstance, api: ApiDoor, client: Client, feeds: Feeds, o: StreamOptions): { open(): number } {
  let open = 0;
  app.get('/api/runs/:id/events', async (req, reply) => {
    const access = api.allow(req, reply);
    if (access === null) return reply;
    const id = (req.params as { id: string }).id;
    const version = declaredVersion(req);
    if (typeof version === 'string') return json(reply, 400, { error: version });
    const cursor = resumeCursor(req);
    if (typeof cursor === 'string') return json(reply, 400, { error: cursor });
    if (open >= o.maxStreams)
      return json(reply.header('retry-after', '5'), 503, { error: 'this console serves as many streams as it may' });
    try {
      await runHandle(client, id).describe();
    } catch (err) {
      if (err instanceof WorkflowNotFoundError) return json(reply, 404, { error: `there is no run ${id}` });
      return json(reply, 503, { error: `run ${id} cannot be read: ${(err as Error).message}` });
    }
    const feed = feeds.acquire(id);
    if (feed === null) return json(reply.header('retry-after', '5'), 503, { error: 'this console follows as many runs as it may' });
    open++;
    reply.hijack();
    reply.raw.writeHead(200, HEADERS);
    try {
      await new Stream(id, feed, reply.raw, { version, cursor, access, api, o }).run();
    } finally {
      open--;
      feeds.release(feed);
      reply.raw.end();
    }
  });
  return { open: () => open };
}

class Stream {
  private cursor: Cursor;
  private sentRun = -1;
  private readonly sentTasks = new Map<string, number>();
  private sentHint = 0;
  private closed = false;
  private lastWrite = Date.now();
  private readonly gone: Promise<void>;

  constructor(
    private readonly workflowId: string,
    private readonly feed: RunFeed,
    private readonly res: ServerResponse,
    private readonly c: { version: number; cursor: Cursor; access: Access; api: ApiDoor; o: StreamOptions },
  ) {
    this.cursor = c.cursor;
    this.gone = new Promise((resolve) =>
      res.once('close', () => {
        this.closed = true;
        resolve();
      }),
    );
  }

  async run(): Promise<void> {
    const until = Date.now() + this.c.o.maxMs;
    await this.write(`retry: ${RETRY_MS}\n\n`);
    while (!this.closed && Date.now() < until && this.c.api.stillGood(this.c.access)) {
      const seen = this.feed.generation;
      const { text, done } = await this.next();
      if (text !== '') await this.write(text);
      if (done) return;
      if (text !== '') continue;
      const wait = Math.min(this.c.o.keepAliveMs - (Date.now() - this.lastWrite), until - Date.now());
      if (wait <= 0) await this.write(': keep-alive\n\n');
      else await Promise.race([this.feed.changed(wait, seen), this.gone]);
    }
  }

  /** What to send now: the frames after the cursor, then (once caught up) snapshots, the hint, and the end. */
  private async next(): Promise<{ text: string; done: boolean }> {
    let entries: Entry[] | 'behind';
    try {
      entries = this.feed.entriesAfter(this.cursor, BATCH_FRAMES);
      if (entries === 'behind') entries = await this.feed.backfill(this.cursor, BATCH_FRAMES);
    } catch (err) {
      if (err instanceof GapError) return { text: sse(faultFrame(formatCursor(this.cursor), 'gap', err.message)), done: true };
      return { text: '', done: false }; // a Query that failed: the feed says so as a hint, and the next try may answer
    }
    let text = '';
    for (const e of entries) {
      const f = this.frameOf(e);
      this.cursor = e.cursor;
      if (f !== null) text += sse(f);
      if (text.length >= BATCH_BYTES) return { text, done: false };
    }
    const head = this.feed.head;
    // A run the reader never got an answer from has no record to catch up with: only a hint to give.
    if (head === null && entries.length === 0) return { text: this.hint(formatCursor(this.cursor)), done: false };
    if (entries.length === BATCH_FRAMES || head === null || compareCursors(this.cursor, head) < 0) return { text, done: false };
    const state = this.state();
    return { text: text + state.text, done: state.done };
  }

  /** The feed's hint, when this stream has not sent it yet and has every frame up to what it is about. */
  private hint(id: string): string {
    const f = this.feed;
    if (!understands(this.c.version, 'hint') || f.hint === null || f.hint.serial <= this.sentHint || f.hint.since > this.cursor.seq)
      return '';
    const { serial, ...hint } = f.hint;
    this.sentHint = serial;
    return sse(hintFrame(id, hint));
  }

  private frameOf(e: Entry): Frame | null {
    if ('event' in e) return eventFrame(this.workflowId, e.event, this.c.version, e.text);
    return understands(this.c.version, 'fragment') ? fragmentFrame(e.cursor.seq, e.fragment) : null;
  }

  /** Frames of state, sent once the stream sent every frame of the record up to where they were read. */
  private state(): { text: string; done: boolean } {
    const id = formatCursor(this.cursor);
    const v = this.c.version;
    const f = this.feed;
    let text = '';
    if (f.run !== null && f.run.version > this.sentRun && f.run.at <= this.cursor.seq) {
      text += sse(runFrame(id, f.run.version, f.run.value));
      this.sentRun = f.run.version;
    }
    if (understands(v, 'task'))
      for (const [taskId, t] of f.tasks)
        if (t.version > (this.sentTasks.get(taskId) ?? -1) && t.at <= this.cursor.seq) {
          text += sse(taskFrame(id, t.version, t.value));
          this.sentTasks.set(taskId, t.version);
        }
    text += this.hint(id);
    if (f.failure !== null) return { text: text + sse(faultFrame(id, f.failure.error, f.failure.detail)), done: true };
    if (f.ended && f.run !== null && this.sentRun === f.run.version) return { text: text + sse(endFrame(id, f.run.value)), done: true };
    return { text, done: false };
  }

  /** Writes `text`; resolves once the socket took it (or the client went). */
  private async write(text: string): Promise<void> {
    if (this.closed) return;
    this.lastWrite = Date.now();
    if (this.res.write(text)) return;
    await Promise.race([new Promise<void>((resolve) => this.res.once('drain', () => resolve())), this.gone]);
  }
}
