/**
 * A finished run's decisions as a replay (SPEC section 5): a live session becomes a
 * deterministic regression fixture. Provider failures are left out (they are not decisions the
 * run acted on); each call of a reply becomes one tool decision, in order.
 */
import type { Store } from '../store/store';
import type { Decision, Replay } from '../core/contracts';

export function exportReplay(store: Store, head: string | null): Replay {
  const decisions = store
    .transcript(head)
    .flatMap((e) => ('decision' in e ? [store.get<Decision>(e.decision)] : []))
    .filter((d) => d.kind !== 'model_error');
  return { schema_version: 1, decisions };
}
