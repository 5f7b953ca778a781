/**
 * The console's sign-in state, kept in memory and bounded: one-time sign-in codes and sessions.
 *
 * Hazards: a code is a bearer secret in a URL, so it works once and only for a short time, and
 * only a POST uses it up (a link prefetcher that GETs it burns nothing). A session ends after
 * an idle spell, at its absolute lifetime however busy it is (a stolen cookie kept alive by
 * refreshing still dies), or when it is signed out; when the table is full, the least recently
 * used one is dropped, so signing in again and again cannot grow memory. Both tables read the
 * clock they are given, never the wall clock, so tests show expiry without waiting.
 */
import { randomBytes } from 'node:crypto';

export interface Session {
  name: string;
  csrf: string;
  /** When it last served a request, by the injected clock. */
  seen: number;
  /** When it was made: it ends at this plus the absolute lifetime, whatever its use. */
  started: number;
  /**
   * The whole diffs this session has been sent, keyed by `diffKey` of their actions: Approve of an
   * action whose diff was cut for display is refused until its key is here. Bounded (oldest first).
   */
  diffsOpened: Set<string>;
}

/** Whole diffs remembered per session; an older one must be opened again to approve its action. */
const MAX_DIFFS_OPENED = 50;

/** Remembers that `session` was sent the whole diff of the action of `key`. */
export function markDiffOpened(session: Session, key: string): void {
  session.diffsOpened.delete(key);
  session.diffsOpened.add(key);
  for (const old of session.diffsOpened) {
    if (session.diffsOpened.size <= MAX_DIFFS_OPENED) break;
    session.diffsOpened.delete(old);
  }
}

const secret = () => randomBytes(32).toString('base64url');

/** Drops the first (oldest) entries of `map` until it holds at most `most`. */
function trim<K, V>(map: Map<K, V>, most: number): void {
  for (const key of map.keys()) {
    if (map.size <= most) return;
    map.delete(key);
  }
}

export class SignInCodes {
  /** code -> when it expires; insertion order is age, oldest first. */
  private readonly live = new Map<string, number>();

  constructor(
    private readonly now: () => number,
    private readonly ttlMs: number,
    private readonly most: number,
  ) {}

  make(): string {
    this.sweep();
    const code = secret();
    this.live.set(code, this.now() + this.ttlMs);
    trim(this.live, this.most);
    return code;
  }

  /** True while `code` is unused and unexpired; looking does not use it up. */
  valid(code: string): boolean {
    const expires = this.live.get(code);
    if (expires === undefined) return false;
    if (this.now() < expires) return true;
    this.live.delete(code);
    return false;
  }

  /** Uses `code` up: true the first time, for a valid code only. */
  use(code: string): boolean {
    const ok = this.valid(code);
    this.live.delete(code);
    return ok;
  }

  private sweep(): void {
    const now = this.now();
    for (const [code, expires] of this.live) if (now >= expires) this.live.delete(code);
  }
}

export class Sessions {
  /** session id -> session; insertion order is recency of use, least recently used first. */
  private readonly live = new Map<string, Session>();

  constructor(
    private readonly now: () => number,
    private readonly idleMs: number,
    private readonly maxMs: number,
    private readonly most: number,
  ) {}

  get size(): number {
    return this.live.size;
  }

  /** A new session for `name`, and its id (the cookie's value). */
  open(name: string): string {
    this.sweep();
    const sid = secret();
    const now = this.now();
    this.live.set(sid, { name, csrf: secret(), seen: now, started: now, diffsOpened: new Set() });
    trim(this.live, this.most);
    return sid;
  }

  /** The live session of `sid`, its idle timer restarted; null for an unknown, idle, too old or ended one. */
  touch(sid: string): Session | null {
    const s = this.live.get(sid);
    if (s === undefined) return null;
    this.live.delete(sid);
    const now = this.now();
    if (this.over(s, now)) return null;
    s.seen = now;
    this.live.set(sid, s); // to the end: the most recently used
    return s;
  }

  /** The live session of `sid` as it is, its idle timer untouched; null for an unknown, idle, too old or ended one. */
  peek(sid: string): Session | null {
    const s = this.live.get(sid);
    return s === undefined || this.over(s, this.now()) ? null : s;
  }

  end(sid: string): void {
    this.live.delete(sid);
  }

  private over(s: Session, now: number): boolean {
    return now - s.seen >= this.idleMs || now - s.started >= this.maxMs;
  }

  private sweep(): void {
    const now = this.now();
    for (const [sid, s] of this.live) if (this.over(s, now)) this.live.delete(sid);
  }
}
