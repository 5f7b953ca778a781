/**
 * Who is asking, on the console's API (`/api/...`): a signed-in browser by its session cookie, or a
 * machine client by one of the operator's API tokens in `Authorization: Bearer`. The principal of
 * what it does is `console:<name>` for a session and `api:<token name>` for a token.
 *
 * Hazards: a token in an address would sit in logs and histories, so an API request that carries
 * one in its query is refused, whoever it is. A request that offers a bearer token is judged by it
 * alone (a wrong one is never rescued by a cookie). Tokens are compared in constant time. A
 * session's state changes need its CSRF token (the `x-csrf-token` header); a bearer request has no
 * cookie for another site to ride on, so it needs none.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { same, type Door } from './guards';
import type { Session } from './sign-in';

export type Access =
  { kind: 'session'; sid: string; session: Session; principal: string } | { kind: 'token'; name: string; principal: string };

/** Query parameters that would carry a secret in an address. */
const SECRET_PARAMETERS = ['token', 'access_token', 'api_key', 'key'];

export const json = (reply: FastifyReply, code: number, body: unknown) =>
  reply.code(code).type('application/json; charset=utf-8').send(JSON.stringify(body));

export class ApiDoor {
  constructor(
    private readonly door: Door,
    /** Token name -> token, the operator's (client/console/token.ts `readApiTokens`). */
    private readonly tokens: ReadonlyMap<string, string>,
  ) {}

  /**
   * The request's access, or null after answering it (400 for a secret in the address, 401 for
   * no or a wrong credential).
   */
  allow(req: FastifyRequest, reply: FastifyReply): Access | null {
    const query = (req.query ?? {}) as Record<string, unknown>;
    if (SECRET_PARAMETERS.some((k) => query[k] !== undefined)) {
      json(reply, 400, { error: 'a credential is never taken from an address: send an API token as Authorization: Bearer <token>' });
      return null;
    }
    const header = req.headers.authorization;
    if (header !== undefined) {
      const m = /^Bearer ([^\s]+)$/i.exec(header.trim());
      const name = m ? this.tokenName(m[1]) : null;
      if (name === null) {
        json(reply, 401, { error: "the bearer token is not one of the console's API tokens" });
        return null;
      }
      return { kind: 'token', name, principal: `api:${name}` };
    }
    const current = this.door.session(req);
    if (current === null) {
      json(reply, 401, { error: 'sign in to the console, or send an API token as Authorization: Bearer <token>' });
      return null;
    }
    return { kind: 'session', sid: current.sid, session: current.s, principal: `console:${current.s.name}` };
  }

  /** Whether a session's access is still good (a stream asks this while it runs, without renewing it). */
  stillGood(a: Access): boolean {
    return a.kind === 'token' || this.door.alive(a.sid);
  }

  /** Whether a state change of this access carries what it must: a session's CSRF token in `x-csrf-token`. */
  csrfHeld(req: FastifyRequest, a: Access): boolean {
    if (a.kind === 'token') return true;
    const sent = req.headers['x-csrf-token'];
    return typeof sent === 'string' && same(sent, a.session.csrf);
  }

  private tokenName(offered: string): string | null {
    let found: string | null = null;
    // Every token is compared, so the time taken does not say which one came close.
    for (const [name, token] of this.tokens) if (same(offered, token)) found = name;
    return found;
  }
}
