/**
 * The activities of agentRun: thin Temporal adapters over the tools, the sandbox, the models and
 * the host, one file per group, composed here over one worker's dependencies (the worker wires
 * real ones; tests pass their own real ones). core/activities.ts is the interface workflows call.
 */
import type { Activities } from '../core/activities';
import { decideActivities } from './decide';
import { withDeterministicFailures } from './failures';
import { Kit, type ActivityDeps } from './kit';
import { loadActivities } from './load';
import { mergeActivities } from './merge';
import { setupActivities } from './setup';
import { toolActivities } from './tools';
import { verificationActivities } from './verification';
import { writeActivities } from './writes';

export type { ActivityDeps, HarnessConfig, SetupDeps } from './kit';
export { deterministicFailure } from './failures';

export function createActivities(deps: ActivityDeps): Activities {
  const kit = new Kit(deps);
  return withDeterministicFailures(
    {
      ...loadActivities(kit),
      ...setupActivities(kit),
      ...decideActivities(kit),
      ...toolActivities(kit),
      ...writeActivities(kit),
      ...mergeActivities(kit),
      ...verificationActivities(kit),
    },
    { diskFullWaitMs: deps.config.diskFullWaitMs ?? 0, stateDir: deps.config.stateDir },
  );
}
