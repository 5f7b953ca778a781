/**
 * The console's sign-in and sign-out, and its read-only pages: the list of runs and a run's card.
 *
 * Hazards: the console token signs in only from the form's POST, never from an address; a
 * one-time code is used up only by that POST too. Sign-out, a change of state, needs the session's
 * CSRF token.
 */
import { randomBytes } from 'node:crypto';
import { WorkflowNotFoundError, type Client, type WorkflowExecutionInfo } from '@temporalio/client';
import type { FastifyInstance } from 'fastify';
import { FIXTURE_ATTRIBUTE, REASON_ATTRIBUTE, STATUS_ATTRIBUTE } from '../../core/search-attributes';
import { querySnapshot, readRun, runHandle, runsQuery } from '../run-access';
import { LIVE_POLICY } from './live-script';
import { csrfHeld, formOf, html, same, type Door } from './guards';
import { cardPage, listPage, loginPage, messagePage, type FinishedRow, type Notice, type PendingRow } from './pages';
import type { SignInCodes } from './sign-in';
import { diffLink, wholeDiffOpened } from './whole-diff';

const NAME = /^[A-Za-z0-9_.-]{1,64}$/;
const badName = 'A name is 1 to 64 letters, digits, dots, dashes or underscores.';
const usedUp =
  'That sign-in link is used up or expired: a link works once, within minutes of the console printing it. Sign in with the console token instead.';

/** Trace events shown on a run's card. */
const RECENT_EVENTS = 30;

/** `GET /login` and `POST /login` (with the console token or a one-time code), and `POST /logout`. */
export function signInRoutes(app: FastifyInstance, door: Door, codes: SignInCodes, token: string): void {
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
    const body = formOf(req);
    const name = String(body.name ?? '');
    if (typeof body.code === 'string' && body.code !== '') {
      const code = body.code;
      if (!codes.valid(code)) return html(reply, 401, loginPage({ error: usedUp }));
      if (!NAME.test(name)) return html(reply, 400, loginPage({ code, error: badName }));
      codes.use(code);
    } else {
      if (!same(String(body.token ?? ''), token)) return html(reply, 401, loginPage({ error: 'The console token is wrong.' }));
      if (!NAME.test(name)) return html(reply, 400, loginPage({ error: badName }));
    }
    door.open(reply, name);
    return reply.code(303).header('location', '/').send();
  });
  app.post('/logout', async (req, reply) => {
    const current = door.session(req);
    if (current === null) return door.denied(req, reply);
    if (!csrfHeld(formOf(req), current.s))
      return html(reply, 403, messagePage('Refused', "The form did not carry this session's CSRF token; you are still signed in."));
    door.end(reply, current.sid);
    return reply.code(303).header('location', '/login').send();
  });
}

/** Where a run's card links into the Temporal Web UI, when its address is known. */
export interface WebUi {
  webUi: string | null;
  namespace: string;
}

/** `GET /`: runs awaiting approval and runs finished; `GET /runs/:id`: a run's card. */
export function runPages(app: FastifyInstance, door: Door, client: Client, ui: WebUi): void {
  app.get('/', async (req, reply) => {
    const s = door.session(req)?.s;
    if (!s) return door.denied(req, reply);
    const [pending, finished] = await Promise.all([pendingRuns(client), finishedRuns(client)]);
    return html(reply.header('content-security-policy', LIVE_POLICY), 200, listPage(s.name, s.csrf, pending, finished, new Date()));
  });

  app.get('/runs/:id', async (req, reply) => {
    const s = door.session(req)?.s;
    if (!s) return door.denied(req, reply);
    const id = (req.params as { id: string }).id;
    const notice = String((req.query as Record<string, unknown>).notice ?? '');
    let run;
    try {
      run = await readRun(runHandle(client, id), { tail: RECENT_EVENTS });
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
    const webUi = ui.webUi ? `${ui.webUi}/namespaces/${encodeURIComponent(ui.namespace)}/workflows/${encodeURIComponent(id)}` : null;
    const known: Notice[] = ['approved', 'rejected', 'stale', 'unanswered'];
    // The form's token is the approval's message id: the same form posted twice is taken once.
    const formToken = `console-${randomBytes(12).toString('base64url')}`;
    const p = run.view.pending_approval;
    return html(
      reply.header('content-security-policy', LIVE_POLICY),
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
          diff_opened: p !== null && wholeDiffOpened(s, p),
        },
        known.includes(notice as Notice) ? (notice as Notice) : null,
      ),
    );
  });
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
      const snap = await querySnapshot(runHandle(client, w.workflowId), undefined, 3000).catch(() => null);
      const view = snap?.view ?? null;
      return {
        workflow_id: w.workflowId,
        fixture: w.typedSearchAttributes.get(FIXTURE_ATTRIBUTE) ?? view?.fixture ?? null,
        started: w.startTime,
        path: view?.pending_approval?.path ?? null,
        counters: view?.counters ?? null,
        parent: view?.parent?.workflow_id ?? null,
        action_id: view?.pending_approval?.action_id ?? null,
        newest: snap?.newest ?? null,
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
