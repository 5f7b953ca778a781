/** `approve` and `reject`: the approval Signal for the pending action, with its digests. */
import { command, type Values } from '../command';
import type { Session } from '../session';
import { access, handleFor, out, principal, readRunView } from './shared';

const options = {
  principal: { kind: 'string', value: 'NAME' },
  reason: { kind: 'string', value: 'TEXT' },
  json: { kind: 'flag' },
} as const;

async function answerApproval(
  session: Session,
  positionals: string[],
  values: Values<typeof options>,
  answer: 'approve' | 'reject',
): Promise<number> {
  const handle = await handleFor(session, positionals);
  const view = await readRunView(session, handle);
  const pending = view.pending_approval;
  if (!pending) {
    process.stderr.write(`no approval is pending for ${handle.workflowId} (status ${view.status})\n`);
    return 2;
  }
  if (positionals[1] && positionals[1] !== pending.action_id) {
    process.stderr.write(`action ${positionals[1]} is not the pending action; pending is ${pending.action_id} (${pending.path})\n`);
    return 2;
  }
  const { approvalFor, ORIGIN, sendApproval } = await access();
  const signal = approvalFor(pending, answer, values.principal ?? principal(), values.reason, `${ORIGIN}:${answer}:${pending.action_id}`);
  await sendApproval(handle, signal);
  if (values.json) out(signal);
  else out(`${answer === 'approve' ? 'approved' : 'rejected'} ${pending.action_id} (apply_patch ${pending.path})`);
  return 0;
}

export const approve = command({
  name: 'approve',
  usage: ['approve <workflow-id> [<action-id>] [--principal NAME] [--json]'],
  summary: 'send the approval Signal for the pending action, with its digests',
  options: { principal: options.principal, json: options.json },
  run: (session, positionals, values) => answerApproval(session, positionals, { ...values, reason: undefined }, 'approve'),
});

export const reject = command({
  name: 'reject',
  usage: ['reject <workflow-id> [<action-id>] [--reason TEXT] [--principal NAME] [--json]'],
  summary: 'send a rejecting approval Signal for the pending action',
  options,
  run: (session, positionals, values) => answerApproval(session, positionals, values, 'reject'),
});
