/**
 * A plain HTTP client of a run's event stream (docs/delivery.md), written with node:http and its
 * own parser, nothing of the console's, so a test reads the stream as any client author would.
 */
import { request, type ClientRequest } from 'node:http';
import type { TraceEvent } from '../../core/trace';

export interface Received {
  id: string;
  event: string;
  data: Record<string, any>;
  /** When it arrived (ms since the epoch). */
  at: number;
}

/**
 * A plain HTTP client of an event stream (node:http and this parser, nothing of the console's):
 * every frame it got in order, across its connections. Like EventSource it reconnects with the last
 * id when the server closes the stream, until it gets `end`; `cut()` drops the connection and
 * stays away until `connect()`.
 */
export class SseClient {
  readonly frames: Received[] = [];
  comments = 0;
  connections = 0;
  /** The status of a connection the console refused. */
  refused: number | null = null;
  ended = false;
  private req: ClientRequest | null = null;
  private away = false;
  private readonly waiters = new Set<() => void>();

  constructor(
    private readonly url: string,
    private readonly headers: Record<string, string>,
  ) {}

  get lastId(): string | null {
    return this.frames.at(-1)?.id ?? null;
  }

  connect(): void {
    this.away = false;
    this.connections++;
    const last = this.lastId;
    const req = request(this.url, { headers: { ...this.headers, ...(last !== null ? { 'last-event-id': last } : {}) } }, (res) => {
      if (res.statusCode !== 200) {
        this.away = true;
        this.refused = res.statusCode ?? 0;
        res.resume();
        return;
      }
      let buffer = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        buffer += chunk;
        for (let end = buffer.indexOf('\n\n'); end >= 0; end = buffer.indexOf('\n\n')) {
          this.take(buffer.slice(0, end));
          buffer = buffer.slice(end + 2);
        }
      });
      res.on('end', () => this.again());
    });
    req.on('error', () => this.again());
    req.end();
    this.req = req;
  }

  cut(): void {
    this.away = true;
    this.req?.destroy();
  }

  waitFor(what: string, test: (f: Received) => boolean, ms = 60_000): Promise<Received> {
    return new Promise((resolve, reject) => {
      const check = () => {
        const found = this.frames.find(test);
        if (!found) return;
        clearTimeout(timer);
        this.waiters.delete(check);
        resolve(found);
      };
      const timer = setTimeout(() => {
        this.waiters.delete(check);
        reject(new Error(`timed out waiting for ${what} (refused: ${this.refused}); last frame ${JSON.stringify(this.frames.at(-1))}`));
      }, ms);
      this.waiters.add(check);
      check();
    });
  }

  /** The trace events the frames carried, in the order they came. */
  events(): TraceEvent[] {
    return this.frames.filter((f) => f.data.event !== undefined).map((f) => f.data.event as TraceEvent);
  }

  private take(block: string): void {
    const lines = block.split('\n');
    if (lines.every((l) => l.startsWith(':'))) return void this.comments++;
    const field = (name: string) => lines.find((l) => l.startsWith(`${name}: `))?.slice(name.length + 2);
    const data = field('data');
    if (data === undefined) return; // the retry line
    const f = { id: field('id')!, event: field('event')!, data: JSON.parse(data), at: Date.now() };
    this.frames.push(f);
    if (f.event === 'end') this.ended = true;
    for (const w of [...this.waiters]) w();
  }

  private again(): void {
    if (this.ended || this.away) return;
    setTimeout(() => {
      if (!this.ended && !this.away) this.connect();
    }, 200);
  }
}
