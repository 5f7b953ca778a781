/**
 * The approval console: a small web app over the same Signal and Queries as the command line.
 * Runs awaiting approval (a visibility query on AgentStatus), the card of a pending write, and
 * Approve / Reject that send the `approval` Signal with the digests the page displayed and the
 * principal `console:<name>` of the signed-in person.
 *
 * Security: every page needs a session. A session is made only by a POST to /login carrying
 * either the console token, typed into the form, or a one-time code from the link the console
 * printed; the token itself never travels in a URL (a GET of `/login?token=...` signs nobody in).
 * A code works once, within 10 minutes, and only a POST uses it up, so a link prefetcher that
 * GETs it burns nothing. Sessions end after 12 hours idle, 24 hours after sign-in however busy,
 * or on sign-out (all three times are options), and at most 100 are kept (the least recently used
 * goes first). State changes, sign-out included, are POST with the session's CSRF token; cookies
 * are HttpOnly and SameSite=Strict; pages carry a CSP that allows no script and no foreign form
 * target. Only requests naming the console are answered (origin.ts): loopback names on loopback,
 * else the operator's public https address, behind whose TLS the cookies are also Secure. Codes
 * and sessions live in memory (sign-in.ts): a restart signs everyone out.
 *
 * A write whose diff was cut for display is approved here only after this session was sent its
 * whole diff: plain text from the host store, served only while that action is the pending one,
 * and only when its digest is the `diff_ref` the prepare activity put in history and it begins
 * with the cut diff the card showed. Reject needs no such step.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import { WorkflowNotFoundError, type Client, type WorkflowExecutionInfo } from '@temporalio/client';
import Fastify, { type FastifyReply, type FastifyRequest } from 'fastify';
import { z } from 'zod';
import { canonicalJson } from '../../core/canonical';
import { MESSAGE_ID } from '../../core/contracts';
import type { PendingApproval } from '../../core/run-view';
import { FIXTURE_ATTRIBUTE, REASON_ATTRIBUTE, STATUS_ATTRIBUTE } from '../../core/search-attributes';
import { queryState, queryTrace, readRun, runHandle, runsQuery, sendApproval } from '../run-access';
import { openStore } from '../stored-trace';
import { answersTo, parsePublicUrl, refusal } from './origin';
import { cardPage, listPage, loginPage, messagePage, signInFirstPage, type FinishedRow, type Notice, type PendingRow } from './pages';
import { markDiffOpened, Sessions, SignInCodes, type Session } from './sign-in';

export interface ConsoleOptions {
  client: Client;
  /** The console's secret: typed into the sign-in form, it makes a session. */
  token: string;
  host: string;
  port: number;
  /**
   * The operator's public `https://` origin of the console (a TLS terminator in front of it).
   * Required off loopback; with it only that Host is answered and cookies are Secure.
   */
  publicUrl?: string | null;
  /** Base address of the Temporal Web UI, when known. */
  webUi: string | null;
  namespace: string;
  /**
   * The state folder whose host store holds whole diffs (actions prepared on this host). Without
   * it, an action whose diff was cut cannot be shown whole, so it cannot be approved here.
   */
  stateDir?: string | null;
  /** How long an approval waits for the run to confirm it (recorded or ignored). */
  confirmMs?: number;
  /** The clock of sessions and sign-in codes, in ms since the epoch; tests inject one to show expiry. */
  now?: () => number;
  /** A session ends after this long without a request (default 12 hours). */
  sessionIdleMs?: number;
  /** A session ends this long after sign-in, however busy (default 24 hours). */
  sessionMaxMs?: number;
  /** A sign-in code is good for this long after it was made (default 10 minutes). */
  codeTtlMs?: number;
}

export interface RunningConsole {
  /** Where it listens. */
  url: string;
  /** Where browsers reach it: the public origin when one was given, else `url`. */
  publicUrl: string;
  /** A sign-in link with a fresh one-time code, `<publicUrl>/login?code=...`; it never carries the token. */
  signInLink(): string;
  close(): Promise<void>;
}

export const SESSION_IDLE_MS = 12 * 3600_000;
export const SESSION_MAX_MS = 24 * 3600_000;
export const CODE_TTL_MS = 10 * 60_000;
export const MAX_SESSIONS = 100;
const MAX_CODES = 100;

const COOKIE = 'agent_console';
const NAME = /^[A-Za-z0-9_.-]{1,64}$/;
const digest = z.string().regex(/^[0-9a-f]{64}$/);
const decisionForm = z.strictObject({
  csrf: z.string().min(1).max(200),
  action_id: digest,
  args_digest: digest,
  workspace_digest: digest,
  decision: z.enum(['approve', 'reject']),
  reason: z.string().max(2000).optional(),
  /** The form's own token: the approval's message id. */
  message_id: MESSAGE_ID.optional(),
});

const actionQuery = z.strictObject({ action_id: digest, args_digest: digest, workspace_digest: digest });

/** Trace events shown on a run's card. */
const RECENT_EVENTS = 30;

/** The whole diff (up to 8 MiB) goes out in slices of this size, written as the reader takes them. */
const DIFF_SLICE = 64 * 1024;

/** What a session must have opened before it may approve `p`: the action, its digests and its whole diff's digest. */
const diffKey = (p: PendingApproval) => [p.action_id, p.args_digest, p.workspace_digest, p.diff_ref ?? ''].join(':');

/** The address of the plain-text whole diff of `p`, pending in run `id`. */
const diffLink = (id: string, p: PendingApproval) =>
  `/runs/${encodeURIComponent(id)}/diff?${new URLSearchParams({ action_id: p.action_id, args_digest: p.args_digest, workspace_digest: p.workspace_digest })}`;

/** Constant-time comparison of two secrets of any length. */
function same(a: string, b: string): boolean {
  const h = (s: string) => createHash('sha256').update(s).digest();
  return timingSafeEqual(h(a), h(b)) && a.length === b.length;
}

function cookieOf(req: FastifyRequest): string | null {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const [k, ...v] = part.trim().split('=');
    if (k === COOKIE) return v.join('=');
  }
  return null;
}

export async function startConsole(o: ConsoleOptions): Promise<RunningConsole> {
  if (o.token.length < 16) throw new Error('the console token must be at least 16 characters');
  const publicOrigin = o.publicUrl ? parsePublicUrl(o.publicUrl) : null;
  if (typeof publicOrigin === 'string') throw new Error(publicOrigin);
  const refused = refusal(o.host, publicOrigin);
  if (refused !== null) throw new Error(refused);
  const now = o.now ?? Date.now;
  const sessions = new Sessions(now, o.sessionIdleMs ?? SESSION_IDLE_MS, o.sessionMaxMs ?? SESSION_MAX_MS, MAX_SESSIONS);
  const codes = new SignInCodes(now, o.codeTtlMs ?? CODE_TTL_MS, MAX_CODES);
  const app = Fastify({ logger: false, bodyLimit: 16 * 1024 });
  app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string' }, (_req, body, done) => {
    done(null, Object.fromEntries(new URLSearchParams(body as string)));
  });
  // Only requests that name this console reach the app: a page elsewhere whose name was rebound
  // to the console's address (DNS rebinding) gets nothing, nor does a foreign Host.
  const misdirected = publicOrigin
    ? `misdirected request: this console answers only to ${new URL(publicOrigin.url).host}\n`
    : 'misdirected request: this console answers only to loopback names\n';
  app.addHook('onRequest', async (req, reply) => {
    if (!answersTo(req.headers.host, publicOrigin)) return reply.code(421).type('text/plain').send(misdirected);
  });
  app.addHook('onSend', async (_req, reply) => {
    // A route may set a stricter policy of its own (the whole diff: no rendering at all).
    if (!reply.hasHeader('content-security-policy'))
      reply.header(
        'content-security-policy',
        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
      );
    reply.header('x-frame-options', 'DENY');
    reply.header('referrer-policy', 'no-referrer');
    reply.header('x-content-type-options', 'nosniff');
    reply.header('cache-control', 'no-store');
  });

  const html = (reply: FastifyReply, code: number, body: string) => reply.code(code).type('text/html; charset=utf-8').send(body);
  /** The request's live session, its idle timer restarted. */
  const session = (req: FastifyRequest): { sid: string; s: Session } | null => {
    const sid = cookieOf(req);
    const s = sid === null ? null : sessions.touch(sid);
    return s === null ? null : { sid: sid!, s };
  };
  // Behind the operator's TLS the cookie is Secure: a browser never sends it over plain HTTP.
  const attributes = `HttpOnly; SameSite=Strict; Path=/${publicOrigin ? '; Secure' : ''}`;
  const clearCookie = (reply: FastifyReply) => reply.header('set-cookie', `${COOKIE}=; ${attributes}; Max-Age=0`);
  const denied = (req: FastifyRequest, reply: FastifyReply) => {
    if (cookieOf(req) !== null) clearCookie(reply);
    return html(
      reply,
      401,
      signInFirstPage(
        'Every page needs a session: open the one-time link the console printed, or sign in with the console token. A session ends after a long idle spell, a day after sign-in, or on sign-out.',
      ),
    );
  };
  const badName = 'A name is 1 to 64 letters, digits, dots, dashes or underscores.';
  const usedUp =
    'That sign-in link is used up or expired: a link works once, within minutes of the console printing it. Sign in with the console token instead.';

  app.get('/login', async (req, reply) => {
    const query = req.query as Record<string, unknown>;
    // The token never signs in from an address (it would sit in history, logs and Referer headers),
    // and it is not echoed into the form either.
    if (query.token !== undefined)
      return html(reply, 400, loginPage({ error: 'The console token is not taken from an address: type it here.' }));
    if (query.code === undefined) return html(reply, 200, loginPage());
    const code = String(query.code);
    // Looking at a code does not use it: only the form's POST does.
    return codes.valid(code) ? html(reply, 200, loginPage({ code })) : html(reply, 401, loginPage({ error: usedUp }));
  });
  app.post('/login', async (req, reply) => {
    const body = (req.body ?? {}) as Record<string, unknown>;
    const name = String(body.name ?? '');
    if (typeof body.code === 'string' && body.code !== '') {
      const code = body.code;
      if (!codes.valid(code)) return html(reply, 401, loginPage({ error: usedUp }));
      if (!NAME.test(name)) return html(reply, 400, loginPage({ code, error: badName }));
      codes.use(code);
    } else {
      if (!same(String(body.token ?? ''), o.token)) return html(reply, 401, loginPage({ error: 'The console token is wrong.' }));
      if (!NAME.test(name)) return html(reply, 400, loginPage({ error: badName }));
    }
    reply.header('set-cookie', `${COOKIE}=${sessions.open(name)}; ${attributes}`);
    return reply.code(303).header('location', '/').send();
  });
  app.post('/logout', async (req, reply) => {
    const current = session(req);
    if (current === null) return denied(req, reply);
    const body = (req.body ?? {}) as Record<string, unknown>;
    if (typeof body.csrf !== 'string' || !same(body.csrf, current.s.csrf))
      return html(reply, 403, messagePage('Refused', "The form did not carry this session's CSRF token; you are still signed in."));
    sessions.end(current.sid);
    clearCookie(reply);
    return reply.code(303).header('location', '/login').send();
  });

  app.get('/', async (req, reply) => {
    const s = session(req)?.s;
    if (!s) return denied(req, reply);
    const [pending, finished] = await Promise.all([pendingRuns(o.client), finishedRuns(o.client)]);
    return html(reply, 200, listPage(s.name, s.csrf, pending, finished, new Date()));
  });

  app.get('/runs/:id', async (req, reply) => {
    const s = session(req)?.s;
    if (!s) return denied(req, reply);
    const id = (req.params as { id: string }).id;
    const notice = String((req.query as Record<string, unknown>).notice ?? '');
    let run;
    try {
      run = await readRun(runHandle(o.client, id), { tail: RECENT_EVENTS });
    } catch (err) {
      const missing = err instanceof WorkflowNotFoundError;
      return html(
        reply,
        missing ? 404 : 503,
        messagePage(
          missing ? 'No such run' : 'Run not readable',
          missing ? `There is no run ${id}.` : `Run ${id}: ${(err as Error).message}`,
        ),
      );
    }
    const webUi = o.webUi ? `${o.webUi}/namespaces/${encodeURIComponent(o.namespace)}/workflows/${encodeURIComponent(id)}` : null;
    const known: Notice[] = ['approved', 'rejected', 'stale', 'unanswered'];
    // The form's token is the approval's message id: the same form posted twice is taken once.
    const formToken = `console-${randomBytes(12).toString('base64url')}`;
    const p = run.view.pending_approval;
    return html(
      reply,
      200,
      cardPage(
        {
          workflow_id: id,
          view: run.view,
          trace: run.trace,
          web_ui: webUi,
          csrf: s.csrf,
          user: s.name,
          form_token: formToken,
          diff_link: p ? diffLink(id, p) : null,
          diff_opened: p !== null && s.diffsOpened.has(diffKey(p)),
        },
        known.includes(notice as Notice) ? (notice as Notice) : null,
      ),
    );
  });

  // The whole diff of the pending action, as plain text that nothing renders: the repository's
  // and the model's text may hold HTML. Sending it whole to a GET unlocks Approve for the session.
  app.get('/runs/:id/diff', async (req, reply) => {
    const current = session(req);
    if (current === null) return denied(req, reply);
    const id = (req.params as { id: string }).id;
    const q = actionQuery.safeParse(req.query);
    if (!q.success)
      return html(reply, 400, messagePage('Refused', "The address names no action: open the whole diff from the run's card."));
    let p: PendingApproval | null;
    try {
      p = (await queryState(runHandle(o.client, id))).pending_approval;
    } catch {
      return html(reply, 409, messagePage('Not shown', `Run ${id} is not running, or no worker answers for it.`));
    }
    if (
      p === null ||
      p.action_id !== q.data.action_id ||
      p.args_digest !== q.data.args_digest ||
      p.workspace_digest !== q.data.workspace_digest
    )
      return html(
        reply,
        409,
        messagePage('Not shown', 'That action is no longer the pending one of this run: open its card again.', cardLink(id)),
      );
    const whole = wholeDiff(o.stateDir ?? null, p);
    if (typeof whole !== 'string') return html(reply, whole.status, messagePage('Not shown', whole.why, cardLink(id)));
    if (req.method === 'GET') {
      const key = diffKey(p);
      // Only a body sent whole counts as opened: an aborted transfer never emits 'finish'.
      reply.raw.once('finish', () => markDiffOpened(current.s, key));
    }
    return reply
      .code(200)
      .type('text/plain; charset=utf-8')
      .header('content-security-policy', "default-src 'none'; sandbox; frame-ancestors 'none'")
      .header('content-disposition', 'inline')
      .send(Readable.from(slices(whole)));
  });

  app.post('/runs/:id/approval', async (req, reply) => {
    const s = session(req)?.s;
    if (!s) return denied(req, reply);
    const id = (req.params as { id: string }).id;
    const body = (req.body ?? {}) as Record<string, unknown>;
    if (typeof body.csrf !== 'string' || !same(body.csrf, s.csrf))
      return html(reply, 403, messagePage('Refused', "The form did not carry this session's CSRF token; nothing was sent."));
    const form = decisionForm.safeParse(Object.fromEntries(Object.entries(body).filter(([k, v]) => !(k === 'reason' && v === ''))));
    if (!form.success)
      return html(
        reply,
        400,
        messagePage(
          'Refused',
          `The form is not an approval: ${form.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`,
        ),
      );
    const f = form.data;
    const handle = runHandle(o.client, id);
    if (f.decision === 'approve') {
      let p: PendingApproval | null;
      try {
        p = (await queryState(handle)).pending_approval;
      } catch {
        return html(reply, 409, messagePage('Not sent', `Run ${id} is not running, or no worker answers for it; nothing was sent.`));
      }
      // The run takes an approval only for its pending action, so the gate is asked of that one.
      if (p !== null && p.action_id === f.action_id && p.diff_truncated && !s.diffsOpened.has(diffKey(p)))
        return html(
          reply,
          403,
          messagePage(
            'Not sent',
            `The diff of ${p.path} was cut for display, and this session has not opened it whole: open the whole diff from the card first, then approve. Rejecting needs no such step.`,
            cardLink(id),
          ),
        );
    }
    let before: number;
    try {
      before = (await queryTrace(handle, { tail: 1 })).newest;
    } catch {
      return html(reply, 409, messagePage('Not sent', `Run ${id} is not running, or no worker answers for it; nothing was sent.`));
    }
    try {
      await sendApproval(handle, {
        action_id: f.action_id,
        decision: f.decision,
        args_digest: f.args_digest,
        workspace_digest: f.workspace_digest,
        principal: `console:${s.name}`,
        ...(f.reason ? { reason: f.reason } : {}),
        ...(f.message_id ? { message_id: f.message_id } : {}),
      });
    } catch (err) {
      return html(reply, 409, messagePage('Not sent', `Run ${id} did not take the approval: ${(err as Error).message}`));
    }
    const notice = await confirmation(o.client, id, f.action_id, before, f.decision, o.confirmMs ?? 10_000);
    return reply
      .code(303)
      .header('location', `/runs/${encodeURIComponent(id)}?notice=${notice}`)
      .send();
  });

  await app.listen({ host: o.host, port: o.port });
  const address = app.server.address() as AddressInfo;
  const shown = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const url = `http://${shown}:${address.port}`;
  const publicUrl = publicOrigin?.url ?? url;
  return { url, publicUrl, signInLink: () => `${publicUrl}/login?code=${codes.make()}`, close: () => app.close() };
}

const cardLink = (id: string) => ({ href: `/runs/${encodeURIComponent(id)}`, text: 'back to the card' });

function* slices(text: string): Generator<string> {
  for (let i = 0; i < text.length; i += DIFF_SLICE) yield text.slice(i, i + DIFF_SLICE);
}

/**
 * The whole diff of pending action `p`: its own diff when nothing was cut, else the host store's
 * text under `diff_ref`, checked against that digest and against the cut diff history holds.
 */
function wholeDiff(stateDir: string | null, p: PendingApproval): string | { status: number; why: string } {
  if (!p.diff_truncated) return p.diff;
  if (p.diff_ref === undefined)
    return {
      status: 409,
      why: 'No whole diff was kept for this action (it is larger than the host store keeps, or an older build prepared it). Reject it here, or read the change on the worker host and approve it with the approve command.',
    };
  const store = stateDir === null ? null : openStore(stateDir);
  try {
    if (store === null || !store.has(p.diff_ref))
      return {
        status: 503,
        why: 'The whole diff is in the host store of the worker host that prepared this action, which this console does not read: run the console on that host (with its state folder) to open it. Reject works from here.',
      };
    const text = store.get<unknown>(p.diff_ref);
    const bound = typeof text === 'string' && createHash('sha256').update(canonicalJson(text)).digest('hex') === p.diff_ref;
    if (!bound || !text.startsWith(p.diff))
      return { status: 500, why: "The stored diff does not match this action's digest; nothing was unlocked." };
    return text;
  } finally {
    store?.close();
  }
}

/** What the run did with the approval: recorded it, or ignored it (stale or forged digests). */
async function confirmation(
  client: Client,
  id: string,
  actionId: string,
  afterSeq: number,
  decision: 'approve' | 'reject',
  ms: number,
): Promise<Notice> {
  const handle = runHandle(client, id);
  const until = Date.now() + ms;
  while (Date.now() < until) {
    const events = (await queryTrace(handle, { after: afterSeq }, 3000).catch(() => null))?.events;
    const answer = events?.find(
      (e) => e.seq > afterSeq && e.action_id === actionId && (e.type === 'approval_recorded' || e.type === 'approval_ignored'),
    );
    if (answer) return answer.type === 'approval_ignored' ? 'stale' : decision === 'approve' ? 'approved' : 'rejected';
    await new Promise((r) => setTimeout(r, 200));
  }
  return 'unanswered';
}

async function listed(client: Client, query: string, most: number): Promise<WorkflowExecutionInfo[]> {
  const out: WorkflowExecutionInfo[] = [];
  for await (const w of client.workflow.list({ query, pageSize: most })) {
    out.push(w);
    if (out.length >= most) break;
  }
  return out;
}

async function pendingRuns(client: Client): Promise<PendingRow[]> {
  const runs = await listed(client, runsQuery(`ExecutionStatus = 'Running' AND ${STATUS_ATTRIBUTE.name} = 'awaiting_approval'`), 50);
  runs.sort((a, b) => b.startTime.getTime() - a.startTime.getTime());
  return Promise.all(
    runs.map(async (w) => {
      const view = await queryState(runHandle(client, w.workflowId), 3000).catch(() => null);
      return {
        workflow_id: w.workflowId,
        fixture: w.typedSearchAttributes.get(FIXTURE_ATTRIBUTE) ?? view?.fixture ?? null,
        started: w.startTime,
        path: view?.pending_approval?.path ?? null,
        counters: view?.counters ?? null,
        parent: view?.parent?.workflow_id ?? null,
      };
    }),
  );
}

async function finishedRuns(client: Client): Promise<FinishedRow[]> {
  const runs = await listed(client, runsQuery(`ExecutionStatus != 'Running'`), 20);
  runs.sort((a, b) => (b.closeTime?.getTime() ?? 0) - (a.closeTime?.getTime() ?? 0));
  return runs.map((w) => ({
    workflow_id: w.workflowId,
    fixture: w.typedSearchAttributes.get(FIXTURE_ATTRIBUTE) ?? null,
    status: w.typedSearchAttributes.get(STATUS_ATTRIBUTE) ?? w.status.name.toLowerCase(),
    reason: w.typedSearchAttributes.get(REASON_ATTRIBUTE) ?? null,
    closed: w.closeTime ?? null,
  }));
}
