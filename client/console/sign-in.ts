/**
 * The console's sign-in state, kept in memory and bounded: one-time sign-in codes and sessions.
 *
 * Hazards: a code is a bearer secret in a URL, so it works once and only for a short time, and
 * only a POST uses it up (a link prefetcher that GETs it burns nothing). A session ends after
 * an idle spell or when it is signed out; when the table is full, the least recently used one
 * is dropped, so signing in again and again cannot grow memory. Both tables read the clock they
 * are given, never the wall clock, so tests show expiry without waiting.
 */
import { randomBytes } from 'node:crypto';

export interface Session {
  name: string;
  csrf: string;
  /** When it last served a request, by the injected clock. */
  seen: number;
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
    private readonly most: number,
  ) {}

  get size(): number {
    return this.live.size;
  }

  /** A new session for `name`, and its id (the cookie's value). */
  open(name: string): string {
    this.sweep();
    const sid = secret();
    this.live.set(sid, { name, csrf: secret(), seen: this.now() });
    trim(this.live, this.most);
    return sid;
  }

  /** The live session of `sid`, its idle timer restarted; null for an unknown, idle or ended one. */
  touch(sid: string): Session | null {
    const s = this.live.get(sid);
    if (s === undefined) return null;
    this.live.delete(sid);
    const now = this.now();
    if (now - s.seen >= this.idleMs) return null;
    s.seen = now;
    this.live.set(sid, s); // to the end: the most recently used
    return s;
  }

  end(sid: string): void {
    this.live.delete(sid);
  }

  private sweep(): void {
    const now = this.now();
    for (const [sid, s] of this.live) if (now - s.seen >= this.idleMs) this.live.delete(sid);
  }
}
