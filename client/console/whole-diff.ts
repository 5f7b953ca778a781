/**
 * The whole diff of a pending action whose diff was cut for display, and the unlock it gives: a
 * session may approve such an action only after it was sent that diff whole.
 *
 * Hazards: the repository's and the model's text may hold HTML, so the diff goes out as plain text
 * under a policy that renders nothing. It is served only while its action is the pending one,
 * and only when the host store's text has the digest the prepare activity put in history
 * (`diff_ref`) and begins with the cut diff the card showed. Only a body sent whole unlocks.
 */
import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import type { Client } from '@temporalio/client';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { canonicalJson } from '../../core/canonical';
import type { PendingActionView } from '../../core/run-view';
import { queryState, runHandle } from '../run-access';
import { openStore } from '../../store/store';
import { json, type ApiDoor } from './access';
import { html, type Door } from './guards';
import { messagePage } from './pages';
import { markDiffOpened, type Session } from './sign-in';

/** A SHA-256 digest as the forms and addresses carry it. */
export const digest = z.string().regex(/^[0-9a-f]{64}$/);
const actionQuery = z.strictObject({ action_id: digest, args_digest: digest, workspace_digest: digest });

/** The whole diff (up to 8 MiB) goes out in slices of this size, written as the reader takes them. */
const DIFF_SLICE = 64 * 1024;

/** What a session must have opened before it may approve `p`: the action, its digests and its whole diff's digest. */
const diffKey = (p: PendingActionView) => [p.action_id, p.args_digest, p.workspace_digest, p.diff_ref ?? ''].join(':');

/** Whether session `s` was sent the whole diff of pending action `p`. */
export const wholeDiffOpened = (s: Session, p: PendingActionView) => s.diffsOpened.has(diffKey(p));

/** The address of the plain-text whole diff of `p`, pending in run `id`. */
export const diffLink = (id: string, p: PendingActionView) =>
  `/runs/${encodeURIComponent(id)}/diff?${new URLSearchParams({ action_id: p.action_id, args_digest: p.args_digest, workspace_digest: p.workspace_digest })}`;

export const cardLink = (id: string) => ({ href: `/runs/${encodeURIComponent(id)}`, text: 'back to the card' });

/**
 * `GET /runs/:id/diff` (a page of the console) and `GET /api/runs/:id/diff` (a session or an API
 * token): the whole diff of the pending action. Sending it whole to a session unlocks Approve there.
 */
export function wholeDiffRoute(app: FastifyInstance, door: Door, api: ApiDoor, client: Client, stateDir: string | null): void {
  app.get('/runs/:id/diff', async (req, reply) => {
    const current = door.session(req);
    if (current === null) return door.denied(req, reply);
    const id = (req.params as { id: string }).id;
    return serveWholeDiff(req, reply, client, stateDir, current.s, (status, why, back) =>
      html(reply, status, messagePage(status === 400 ? 'Refused' : 'Not shown', why, back ? cardLink(id) : undefined)),
    );
  });
  app.get('/api/runs/:id/diff', async (req, reply) => {
    const a = api.allow(req, reply);
    if (a === null) return reply;
    return serveWholeDiff(req, reply, client, stateDir, a.kind === 'session' ? a.session : null, (status, why) =>
      json(reply, status, { error: why }),
    );
  });
}

/** Sends the whole diff of the pending action the address names, or `refuse`s (`back`: a link to the card helps). */
async function serveWholeDiff(
  req: FastifyRequest,
  reply: FastifyReply,
  client: Client,
  stateDir: string | null,
  session: Session | null,
  refuse: (status: number, why: string, back?: boolean) => FastifyReply,
) {
  const id = (req.params as { id: string }).id;
  const q = actionQuery.safeParse(req.query);
  if (!q.success) return refuse(400, "The address names no action: open the whole diff from the run's card.");
  let p: PendingActionView | null;
  try {
    p = (await queryState(runHandle(client, id))).pending_approval;
  } catch {
    return refuse(409, `Run ${id} is not running, or no worker answers for it.`);
  }
  if (
    p === null ||
    p.action_id !== q.data.action_id ||
    p.args_digest !== q.data.args_digest ||
    p.workspace_digest !== q.data.workspace_digest
  )
    return refuse(409, 'That action is no longer the pending one of this run: open its card again.', true);
  const whole = wholeDiff(stateDir, p);
  if (typeof whole !== 'string') return refuse(whole.status, whole.why, true);
  if (req.method === 'GET' && session !== null) {
    const key = diffKey(p);
    // Only a body sent whole counts as opened: an aborted transfer never emits 'finish'.
    reply.raw.once('finish', () => markDiffOpened(session, key));
  }
  return reply
    .code(200)
    .type('text/plain; charset=utf-8')
    .header('content-security-policy', "default-src 'none'; sandbox; frame-ancestors 'none'")
    .header('content-disposition', 'inline')
    .send(Readable.from(slices(whole)));
}

function* slices(text: string): Generator<string> {
  for (let i = 0; i < text.length; i += DIFF_SLICE) yield text.slice(i, i + DIFF_SLICE);
}

/**
 * The whole diff of pending action `p`: its own diff when nothing was cut, else the host store's
 * text under `diff_ref`, checked against that digest and against the cut diff history holds.
 */
export function wholeDiff(stateDir: string | null, p: PendingActionView): string | { status: number; why: string } {
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
