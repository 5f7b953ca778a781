/** merge_task's two halves: a task's change as one action over its paths, then the approved merge, exactly once. */
import type { MergeEntry, MergeOutcome, PrepareMergeOutcome, RunRef, Written } from '../core/activities';
import type { PendingAction } from '../core/contracts';
import { HANDLERS } from '../tools';
import type { Kit } from './kit';

const { prepare, write } = HANDLERS.merge_task;

export function mergeActivities(kit: Kit) {
  return {
    /** merge_task's first half: the task's change as one action over its paths, or why it cannot merge. */
    async prepareMerge(ref: RunRef, task: { task_id: string; run_id: string }): Promise<PrepareMergeOutcome> {
      const prepared = await prepare(kit.toolContext(ref, 0), kit.config.stateDir, task);
      if (prepared.kind !== 'prepared') return prepared;
      return { kind: 'prepared', action: kit.keepWholeDiff(prepared), entries_ref: kit.store.put('merge', prepared.entries) };
    },

    /** merge_task's second half: the approved merge, exactly once; receipted like a write. */
    async writeMerge(ref: RunRef, action: PendingAction, entriesRef: string): Promise<MergeOutcome & Written> {
      const outcome = await write(kit.toolContext(ref, 0), action, kit.store.get<MergeEntry[]>(entriesRef));
      return kit.written(ref, action, outcome);
    },
  };
}
