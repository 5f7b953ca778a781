/** `fork`: a new run from an ended run's workspace and transcript after one of its turns. */
import { randomBytes } from 'node:crypto';
import type { RunInput } from '../../core/contracts';
import { command, UsageError } from '../command';
import { startAndFollow } from './shared';

export const fork = command({
  name: 'fork',
  usage: ['fork <workflow-id> --at-turn N [--task TEXT] [--approver interactive|policy:NAME] [--wait] [--json] [--id ID]'],
  summary:
    "start a new run whose workspace and transcript are an ended run's after turn N (0: before its first), restored\n" +
    "from its worker host's ledger and store and checked against the digests recorded then; its decision source goes on\n" +
    "where the run's was (the rest of its replay, or the same live model), with --task as its task if given. The run and\n" +
    'its records stay as they were; the new record names it (forked_from). Refused where the host no longer has what it needs.',
  options: {
    'at-turn': { kind: 'int', value: 'N', min: 0 },
    task: { kind: 'string', value: 'TEXT' },
    approver: { kind: 'string', value: 'interactive|policy:NAME' },
    wait: { kind: 'flag' },
    json: { kind: 'flag' },
    id: { kind: 'string', value: 'ID' },
  },
  check(positionals, values) {
    if (!positionals[0]) throw new UsageError('missing <workflow-id>');
    if (values['at-turn'] === undefined) throw new UsageError('--at-turn N is required: the turn after which the new run starts');
  },
  async run(session, positionals, values) {
    const { forkInput } = await import('../fork');
    const turn = values['at-turn']!;
    const input = await forkInput(session.client, positionals[0], turn, values.task);
    if (values.approver !== undefined) input.approver = values.approver as RunInput['approver'];
    const workflowId = values.id ?? `${positionals[0]}-fork-${turn}-${randomBytes(4).toString('hex')}`;
    return startAndFollow(session, input, workflowId, values);
  },
});
