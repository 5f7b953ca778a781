/**
 * `POST /runs/:id/approval`: Approve or Reject of a run's pending action, sent as the `approval`
 * Signal with the digests the card displayed and the principal `console:<name>`, then confirmed
 * from the run's trace (recorded, or ignored as stale).
 *
 * Hazards: the form must carry the session's CSRF token. Approve of an action whose diff was cut
 * for display is refused until this session was sent its whole diff (whole-diff.ts); the gate is
 * asked of the run's pending action, the only one it takes an approval for. The form's message id
 * makes a form posted twice count once.
 */
import type { Client } from '@temporalio/client';
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { MESSAGE_ID } from '../../core/contracts';
import type { PendingActionView } from '../../core/run-view';
import { approvalAnswer, queryState, queryTrace, runHandle, approvalFor, sendApproval, type RunHandle } from '../run-access';
import { csrfHeld, formOf, html, type Door } from './guards';
import { messagePage, type Notice } from './pages';
import type { Session } from './sign-in';
import { cardLink, digest, wholeDiffOpened } from './whole-diff';

const answerForm = z.strictObject({
  csrf: z.string().min(1).max(200),
  action_id: digest,
  args_digest: digest,
  workspace_digest: digest,
  decision: z.enum(['approve', 'reject']),
  reason: z.string().max(2000).optional(),
  /** The form's own token: the approval's message id. */
  message_id: MESSAGE_ID.optional(),
});

type AnswerForm = z.infer<typeof answerForm>;

const unreachable = (id: string) => `Run ${id} is not running, or no worker answers for it; nothing was sent.`;

export function approvalRoute(app: FastifyInstance, door: Door, client: Client, confirmMs: number): void {
  app.post('/runs/:id/approval', async (req, reply) => {
    const s = door.session(req)?.s;
    if (!s) return door.denied(req, reply);
    const id = (req.params as { id: string }).id;
    const body = formOf(req);
    if (!csrfHeld(body, s))
      return html(reply, 403, messagePage('Refused', "The form did not carry this session's CSRF token; nothing was sent."));
    const form = answerForm.safeParse(Object.fromEntries(Object.entries(body).filter(([k, v]) => !(k === 'reason' && v === ''))));
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
    const handle = runHandle(client, id);
    const locked = f.decision === 'approve' ? await approveRefusal(handle, id, f, s) : null;
    if (locked !== null) return html(reply, locked.status, locked.page);
    let before: number;
    try {
      before = (await queryTrace(handle, { tail: 1 })).newest;
    } catch {
      return html(reply, 409, messagePage('Not sent', unreachable(id)));
    }
    try {
      await sendApproval(handle, approvalFor(f, f.decision, `console:${s.name}`, f.reason, f.message_id));
    } catch (err) {
      return html(reply, 409, messagePage('Not sent', `Run ${id} did not take the approval: ${(err as Error).message}`));
    }
    const notice = await confirmation(handle, f.action_id, before, f.decision, confirmMs);
    return reply
      .code(303)
      .header('location', `/runs/${encodeURIComponent(id)}?notice=${notice}`)
      .send();
  });
}

/** Why Approve of `f` is not sent from session `s`, as the page to answer with; null when it may go. */
async function approveRefusal(handle: RunHandle, id: string, f: AnswerForm, s: Session): Promise<{ status: number; page: string } | null> {
  let p: PendingActionView | null;
  try {
    p = (await queryState(handle)).pending_approval;
  } catch {
    return { status: 409, page: messagePage('Not sent', unreachable(id)) };
  }
  // The run takes an approval only for its pending action, so the gate is asked of that one.
  if (p !== null && p.action_id === f.action_id && p.diff_truncated && !wholeDiffOpened(s, p))
    return {
      status: 403,
      page: messagePage(
        'Not sent',
        `The diff of ${p.path} was cut for display, and this session has not opened it whole: open the whole diff from the card first, then approve. Rejecting needs no such step.`,
        cardLink(id),
      ),
    };
  return null;
}

/** What the run did with the approval: recorded it, or ignored it (stale or forged digests). */
async function confirmation(
  handle: RunHandle,
  actionId: string,
  afterSeq: number,
  decision: 'approve' | 'reject',
  ms: number,
): Promise<Notice> {
  const answer = await approvalAnswer(handle, actionId, afterSeq, ms);
  if (answer === null) return 'unanswered';
  return answer.type === 'approval_ignored' ? 'stale' : decision === 'approve' ? 'approved' : 'rejected';
}
