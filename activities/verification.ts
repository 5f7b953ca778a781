/** The host verifier as an activity, and the changed paths of a run that ended before it. */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { CancelledFailure } from '@temporalio/common';
import type { RunRef } from '../core/activities';
import type { VerifierFindings } from '../core/contracts';
import { verify as runVerifier } from '../sandbox/verifier';
import { offThread } from '../host/workspace/thread';
import { infrastructure, type Kit } from './kit';

export function verificationActivities(kit: Kit) {
  return {
    async verify(ref: RunRef, timeoutMs: number): Promise<VerifierFindings> {
      const ctx = kit.toolContext(ref, timeoutMs);
      const findings = await runVerifier({ ...ctx, onProgress: ctx.heartbeat, hiddenAcceptance: ref.hidden_acceptance !== false }).catch(
        infrastructure,
      );
      if (ctx.signal.aborted) throw new CancelledFailure('verification was cancelled');
      return findings;
    },

    /** Changed paths of a run that ended before verification (empty when no workspace exists). */
    async diffPaths(ref: { run_id: string }): Promise<string[]> {
      const paths = kit.paths(ref.run_id);
      if (!existsSync(join(paths.control, 'prepared.json'))) return [];
      return (await offThread('workspaceDiff', [paths, 0, 0], { key: paths.workspace })).paths;
    },
  };
}
