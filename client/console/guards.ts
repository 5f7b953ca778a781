/**
 * What every request of the console passes through before a route sees it: the Host check, the
 * security headers on every reply, and the session door (the cookie, its session, the CSRF token).
 *
 * Hazards: the Host check is what stops DNS rebinding, so it runs as the first hook, before any
 * route. A secret is compared in constant time. A cookie is only ever set HttpOnly and
 * SameSite=Strict, and Secure behind the operator's TLS, so a browser never sends it over plain
 * HTTP.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { answersTo, type PublicOrigin } from './origin';
import { signInFirstPage } from './pages';
import type { Session, Sessions } from './sign-in';

const COOKIE = 'agent_console';

/** Every page's policy: no script, no foreign form target, no framing. */
const PAGE_POLICY =
  "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/** Constant-time comparison of two secrets of any length. */
export function same(a: string, b: string): boolean {
  const h = (s: string) => createHash('sha256').update(s).digest();
  return timingSafeEqual(h(a), h(b)) && a.length === b.length;
}

export const html = (reply: FastifyReply, code: number, body: string) => reply.code(code).type('text/html; charset=utf-8').send(body);

/** The fields of a posted form (the parser `acceptForms` installs makes them an object). */
export const formOf = (req: FastifyRequest) => (req.body ?? {}) as Record<string, unknown>;

/** Whether a posted form carries the CSRF token of session `s`. */
export const csrfHeld = (form: Record<string, unknown>, s: Session) => typeof form.csrf === 'string' && same(form.csrf, s.csrf);

/** Forms arrive URL-encoded: parsed into a plain object of strings. */
export function acceptForms(app: FastifyInstance): void {
  app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string' }, (_req, body, done) => {
    done(null, Object.fromEntries(new URLSearchParams(body as string)));
  });
}

/**
 * Only requests that name this console reach the app: a page elsewhere whose name was rebound to
 * the console's address (DNS rebinding) gets nothing, nor does a foreign Host. Every reply then
 * carries the page policy and headers that forbid framing, sniffing, referrers and caching.
 */
export function guardRequests(app: FastifyInstance, publicOrigin: PublicOrigin | null): void {
  const misdirected = publicOrigin
    ? `misdirected request: this console answers only to ${new URL(publicOrigin.url).host}\n`
    : 'misdirected request: this console answers only to loopback names\n';
  app.addHook('onRequest', async (req, reply) => {
    if (!answersTo(req.headers.host, publicOrigin)) return reply.code(421).type('text/plain').send(misdirected);
  });
  app.addHook('onSend', async (_req, reply) => {
    // A route may set a stricter policy of its own (the whole diff: no rendering at all).
    if (!reply.hasHeader('content-security-policy')) reply.header('content-security-policy', PAGE_POLICY);
    reply.header('x-frame-options', 'DENY');
    reply.header('referrer-policy', 'no-referrer');
    reply.header('x-content-type-options', 'nosniff');
    reply.header('cache-control', 'no-store');
  });
}

/** The session cookie: the only way from a request to its session. */
export class Door {
  private readonly attributes: string;

  constructor(
    private readonly sessions: Sessions,
    secure: boolean,
  ) {
    this.attributes = `HttpOnly; SameSite=Strict; Path=/${secure ? '; Secure' : ''}`;
  }

  /** The request's live session, its idle timer restarted. */
  session(req: FastifyRequest): { sid: string; s: Session } | null {
    const sid = cookieOf(req);
    const s = sid === null ? null : this.sessions.touch(sid);
    return s === null ? null : { sid: sid!, s };
  }

  /** Whether session `sid` is still live, without restarting its idle timer (an open stream asks this). */
  alive(sid: string): boolean {
    return this.sessions.peek(sid) !== null;
  }

  /** Opens a session for `name` and sets its cookie on `reply`. */
  open(reply: FastifyReply, name: string): void {
    reply.header('set-cookie', `${COOKIE}=${this.sessions.open(name)}; ${this.attributes}`);
  }

  /** Ends session `sid` and clears its cookie. */
  end(reply: FastifyReply, sid: string): void {
    this.sessions.end(sid);
    this.clear(reply);
  }

  /** The answer to a request without a live session; a cookie it carried is cleared. */
  denied(req: FastifyRequest, reply: FastifyReply) {
    if (cookieOf(req) !== null) this.clear(reply);
    return html(
      reply,
      401,
      signInFirstPage(
        'Every page needs a session: open the one-time link the console printed, or sign in with the console token. A session ends after a long idle spell, a day after sign-in, or on sign-out.',
      ),
    );
  }

  private clear(reply: FastifyReply): void {
    reply.header('set-cookie', `${COOKIE}=; ${this.attributes}; Max-Age=0`);
  }
}

function cookieOf(req: FastifyRequest): string | null {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const [k, ...v] = part.trim().split('=');
    if (k === COOKIE) return v.join('=');
  }
  return null;
}
