/**
 * The setup phase (SPEC section 11) as activities: the cached setup image, or the setup's commands
 * behind the egress proxy; then the setup's products in the workspace, which becomes the baseline.
 */
import { Context } from '@temporalio/activity';
import { CancelledFailure } from '@temporalio/common';
import type { EgressEvent, RunRef, SetupResult } from '../core/activities';
import { nonRetryable } from '../core/failures';
import { egressPage, runSetup as setupPhase } from '../sandbox/setup';
import { infrastructure, type Kit } from './kit';

export function setupActivities(kit: Kit) {
  const { config } = kit;
  return {
    async runSetup(ref: RunRef): Promise<SetupResult> {
      const spec = ref.fixture.setup;
      if (!spec) throw nonRetryable('ProtocolError', 'runSetup for a run without a setup');
      const setup = kit.deps.setup;
      if (ref.backend !== 'docker' || !setup)
        throw nonRetryable('InfrastructureError', 'a setup phase needs the docker backend, which this worker lacks', [
          'runtime_unavailable',
        ]);
      const ctx = Context.current();
      const { docker, ...proxy } = setup;
      const result = await setupPhase(
        {
          ...proxy,
          backend: docker(ref.image),
          credentialsFor: kit.credentialsFor,
          credential: config.credential,
          limits: config.limits,
          signal: ctx.cancellationSignal,
          heartbeat: () => ctx.heartbeat(),
        },
        kit.paths(ref.run_id),
        spec,
        ref.fixture.egress ?? null,
      ).catch(infrastructure);
      if (ctx.cancellationSignal.aborted) throw new CancelledFailure('the setup was cancelled');
      return result;
    },

    /** The setup's egress events from `offset` on, a page at a time (a setup result carries the first page). */
    async setupEgress(ref: { run_id: string }, offset: number): Promise<EgressEvent[]> {
      return egressPage(kit.paths(ref.run_id), offset);
    },
  };
}
