/**
 * `fork`: a new run from an ended run's workspace and transcript after one of its turns. Its input
 * is the ended run's own input (its fixture or repository, decision source and prompt version,
 * backend, budgets), naming the run, the turn, the run's final transcript head and its replay as
 * it read it. What the worker restores from these is checked on its host (workspace/fork-plan.ts);
 * what this client can tell alone (no such run, a run still going, a turn beyond it) is refused here.
 */
import { randomBytes } from 'node:crypto';
import type { Client } from '@temporalio/client';
import type { RunInput } from '../../core/contracts';
import { command, RefusedInput, UsageError } from '../command';
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
    const turn = values['at-turn']!;
    const input = await forkInput(session.client, positionals[0], turn, values.task);
    if (values.approver !== undefined) input.approver = values.approver as RunInput['approver'];
    const workflowId = values.id ?? `${positionals[0]}-fork-${turn}-${randomBytes(4).toString('hex')}`;
    return startAndFollow(session, input, workflowId, values);
  },
});

/** The input of a fork of `workflowId` after `turn`, or a RefusedInput naming why there is none. */
export async function forkInput(client: Client, workflowId: string, turn: number, task?: string): Promise<RunInput> {
  const { isRunning, runHandle, runOutcome, startInput } = await import('../run-access');
  const handle = runHandle(client, workflowId);
  const input = await startInput<RunInput>(handle);
  if (input === null) throw new RefusedInput(`fork refused: there is no run ${workflowId}`);
  if (input.child) throw new RefusedInput(`fork refused: ${workflowId} is a task's run; fork the run that dispatched it`);
  if (await isRunning(handle)) throw new RefusedInput(`fork refused: ${workflowId} is still running; fork it once it has ended`);
  const { state, transcript } = await runOutcome(handle);
  const turns = state.counters.turns;
  if (turn > turns) throw new RefusedInput(`fork refused: ${workflowId} has ${turns} turns, --at-turn ${turn} is beyond them`);
  const { fork: _itsOwn, ...rest } = input;
  return {
    ...rest,
    // A live run's prompt version as it ran, not the worker's newest.
    ...(state.prompt ? { prompt: state.prompt.version } : {}),
    fork: {
      workflow_id: workflowId,
      run_id: state.run_id,
      turn,
      transcript,
      ...(state.replay_digest ? { replay_digest: state.replay_digest } : {}),
      ...(task !== undefined ? { task } : {}),
    },
  };
}
