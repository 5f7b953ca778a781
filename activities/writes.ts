/** The write path's two halves, each keyed by its action_id: prepare (no side effect), then the approved write. */
import type { PreparePatchOutcome, RunRef, WriteOutcome, Written } from '../core/activities';
import type { PendingAction } from '../core/contracts';
import type { CallView } from '../core/transcript';
import { HANDLERS } from '../tools';
import type { Kit } from './kit';

const { prepare, write } = HANDLERS.apply_patch;

export function writeActivities(kit: Kit) {
  return {
    async preparePatch(ref: RunRef, view: CallView): Promise<PreparePatchOutcome> {
      const prepared = await prepare(kit.toolContext(ref, 0), view.call_id, kit.storedCall(view, 'apply_patch').arguments);
      return prepared.kind === 'prepared' ? { kind: 'prepared', action: kit.keepWholeDiff(prepared) } : prepared;
    },

    /**
     * The write, whether the ledger holds its receipt now (the run counts receipts from the ledger,
     * not beside writes), and the workspace's digest once written. The written bytes are kept in
     * the host store by their digest (a fork restores them).
     */
    async writePatch(ref: RunRef, action: PendingAction, view: CallView): Promise<WriteOutcome & Written> {
      const outcome = await write(kit.toolContext(ref, 0), action, kit.storedCall(view, 'apply_patch').arguments, (bytes) =>
        kit.store.putContent(bytes),
      );
      return kit.written(ref, action, outcome);
    },
  };
}
