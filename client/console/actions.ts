/**
 * `POST /api/runs/<workflow id>/actions`: approve, reject, steer, interrupt or stop a run from any
 * client, each with an idempotency id the client chose. The first request with an id is carried
 * out through the run's Signals (or, to stop a run that is no task, its cancellation) and its
 * outcome kept; a repeat with the same id and the same request answers that outcome and sends
 * nothing, and the same id with another request is refused.
 *
 * Hazards: outcomes are kept in memory and bounded, so a repeat after the console restarted or
 * forgot it is sent again, with the same message id (derived from the principal, the run and the
 * idempotency id): the run takes a message id once (it remembers its last 256), so it still acts
 * once. Approve of an action whose diff was cut for display follows the console's rule: this
 * session opened the whole diff, or the request carries the SHA-256 of the whole diff's text,
 * which only its reader knows. A request refused before anything was sent is not kept.
 */
import { createHash } from 'node:crypto';
import type { Client } from '@temporalio/client';
import { WorkflowNotFoundError } from '@temporalio/client';
import type { FastifyInstance } from 'fastify';
import { canonicalJson } from '../../core/canonical';
import { actionMessageId, actionRequestSchema, type ActionOutcome, type ActionRequest } from '../../core/delivery';
import {
  approvalFor,
  approvalAnswer,
  isRunning,
  queryState,
  queryTrace,
  runHandle,
  sendApproval,
  sendInterrupt,
  sendSteer,
  stopRun,
  wedgedLine,
  wedgedTask,
  type RunHandle,
} from '../run-access';
import { json, type Access, type ApiDoor } from './access';
import { wholeDiff, wholeDiffOpened } from './whole-diff';

/** An answer: its status and body; `keep` when something was sent (a repeat then gets it again). */
interface Answer {
  status: number;
  body: ActionOutcome | { error: string };
  keep: boolean;
}

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/** The outcomes of actions by key (principal, run, idempotency id): bounded, the oldest forgotten first. */
export class Outcomes {
  private readonly kept = new Map<string, { request: string; answer: Promise<Answer> }>();

  constructor(private readonly most: number) {}

  get size(): number {
    return this.kept.size;
  }

  /** The answer to the request under `key`: the first one's for a repeat, else `perform`'s; null when the key was used for another request. */
  answer(key: string, request: string, perform: () => Promise<Answer>): Promise<Answer> | null {
    const found = this.kept.get(key);
    if (found !== undefined) return found.request === request ? found.answer : null;
    // Kept before it is carried out, so a repeat that arrives meanwhile waits for the same answer.
    const answer = perform();
    this.kept.set(key, { request, answer });
    void answer.then(
      (a) => (a.keep ? this.trim() : this.kept.delete(key)),
      () => this.kept.delete(key),
    );
    return answer;
  }

  private trim(): void {
    for (const key of this.kept.keys()) {
      if (this.kept.size <= this.most) return;
      this.kept.delete(key);
    }
  }
}

export function actionsRoute(
  app: FastifyInstance,
  api: ApiDoor,
  client: Client,
  o: { stateDir: string | null; confirmMs: number; outcomes: Outcomes },
): void {
  app.post('/api/runs/:id/actions', async (req, reply) => {
    const access = api.allow(req, reply);
    if (access === null) return reply;
    if (!api.csrfHeld(req, access))
      return json(reply, 403, { error: "a signed-in browser sends its session's CSRF token as x-csrf-token; nothing was sent" });
    const id = (req.params as { id: string }).id;
    const parsed = actionRequestSchema.safeParse(req.body);
    if (!parsed.success)
      return json(reply, 400, {
        error: `not an action: ${parsed.error.issues.map((i) => `${i.path.join('.') || 'body'}: ${i.message}`).join('; ')}`,
      });
    const key = sha256(canonicalJson([access.principal, id, parsed.data.id]));
    const answer = o.outcomes.answer(key, sha256(canonicalJson(parsed.data)), () =>
      perform(runHandle(client, id), parsed.data, access, actionMessageId(key), o).catch((err: unknown) =>
        failed(runHandle(client, id), err),
      ),
    );
    if (answer === null)
      return json(reply, 409, { error: `the id ${parsed.data.id} was used for another request on this run; choose a new id` });
    const a = await answer;
    return json(reply, a.status, a.body);
  });
}

const refused = (status: number, error: string): Answer => ({ status, body: { error }, keep: false });

async function failed(handle: RunHandle, err: unknown): Promise<Answer> {
  const id = handle.workflowId;
  if (err instanceof WorkflowNotFoundError) return refused(404, `there is no run ${id}`);
  // A Query that failed because the run is wedged says why, not only that it failed.
  const wedged = await wedgedTask(handle).catch(() => null);
  if (wedged) return refused(409, `${wedgedLine(id, wedged)}; nothing was done`);
  return refused(409, `run ${id} did not take the action: ${(err as Error).message}; nothing was done`);
}

/** Carries out one action (its first request). */
async function perform(
  handle: RunHandle,
  r: ActionRequest,
  access: Access,
  messageId: string,
  o: { stateDir: string | null; confirmMs: number },
): Promise<Answer> {
  if (!(await isRunning(handle))) return refused(409, `run ${handle.workflowId} is not running; nothing was sent`);
  const sent = (detail: string | null = null): Answer => ({
    status: 200,
    body: { id: r.id, action: r.action, outcome: 'sent', detail, seq: null },
    keep: true,
  });
  switch (r.action) {
    case 'approve':
    case 'reject':
      return answerApproval(handle, r, access, messageId, o);
    case 'steer':
      await sendSteer(handle, r.message, messageId);
      return sent();
    case 'interrupt':
      await sendInterrupt(handle, r.reason, messageId);
      return sent();
    case 'stop':
      await stopRun(handle, r.reason ?? `stopped by ${access.principal}`, messageId);
      return sent();
  }
}

type ApprovalAnswer = Extract<ActionRequest, { action: 'approve' | 'reject' }>;

/** Approve or reject: the cut-diff rule, the Signal, then what the run made of it. */
async function answerApproval(
  handle: RunHandle,
  r: ApprovalAnswer,
  access: Access,
  messageId: string,
  o: { stateDir: string | null; confirmMs: number },
): Promise<Answer> {
  if (r.action === 'approve') {
    const locked = await approveRefusal(handle, r, access, o.stateDir);
    if (locked !== null) return refused(403, locked);
  }
  const before = (await queryTrace(handle, { tail: 1 })).newest;
  await sendApproval(handle, approvalFor(r, r.action, access.principal, r.reason, messageId));
  const answer = await approvalAnswer(handle, r.action_id, before, o.confirmMs);
  const outcome: ActionOutcome =
    answer === null
      ? { id: r.id, action: r.action, outcome: 'unconfirmed', detail: 'sent; the run did not confirm it in time', seq: null }
      : answer.type === 'approval_ignored'
        ? {
            id: r.id,
            action: r.action,
            outcome: 'ignored',
            detail: String((answer.data as { reason?: unknown }).reason ?? ''),
            seq: answer.seq,
          }
        : { id: r.id, action: r.action, outcome: r.action === 'approve' ? 'approved' : 'rejected', detail: null, seq: answer.seq };
  return { status: 200, body: outcome, keep: true };
}

/** Why Approve may not be sent, or null: a cut diff needs this session to have opened it, or the whole diff's SHA-256. */
async function approveRefusal(handle: RunHandle, r: ApprovalAnswer, access: Access, stateDir: string | null): Promise<string | null> {
  const p = (await queryState(handle)).pending_approval;
  // The run takes an approval only for its pending action, so the rule is asked of that one.
  if (p === null || p.action_id !== r.action_id || p.args_digest !== r.args_digest || p.workspace_digest !== r.workspace_digest)
    return null;
  if (!p.diff_truncated && r.diff_sha256 === undefined) return null;
  if (access.kind === 'session' && r.diff_sha256 === undefined && wholeDiffOpened(access.session, p)) return null;
  if (r.diff_sha256 === undefined)
    return `the diff of ${p.path} was cut for display: read the whole diff (the card's diff_url) and send its SHA-256 as diff_sha256; nothing was sent`;
  const whole = wholeDiff(stateDir, p);
  if (typeof whole !== 'string') return `${whole.why} Nothing was sent.`;
  return sha256(whole) === r.diff_sha256 ? null : `diff_sha256 is not the SHA-256 of the whole diff of ${p.path}; nothing was sent`;
}
