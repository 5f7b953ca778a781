/**
 * A fork's input: the ended run's own input (its fixture or repository, decision source and prompt
 * version, backend, budgets), naming the run, the turn, the run's final transcript head and its
 * replay as it read it. What the worker restores from these is checked on its host (workspace/fork-plan.ts); what this
 * client can tell alone (no such run, a run still going, a turn beyond it) is refused here.
 */
import type { Client } from '@temporalio/client';
import type { RunInput } from '../core/contracts';
import { RefusedInput } from './command';
import { isRunning, runHandle, runOutcome, startInput } from './run-access';

export async function forkInput(client: Client, workflowId: string, turn: number, task?: string): Promise<RunInput> {
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
