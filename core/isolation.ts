/** Why isolation evidence does not let a run proceed, as a run's detail says it (pure: the workflow uses it too). */
import type { IsolationEvidence } from './contracts';

/** The probe's own reason, or each failed check with what it found, so a refusal names what is missing or wrong. */
export function isolationRefusal(evidence: IsolationEvidence): string {
  const failed = Object.entries(evidence.checks)
    .filter(([, c]) => !c.ok)
    .map(([name, c]) => `${name} (${c.detail.slice(0, 200)})`);
  return evidence.reason_detail ?? `probe checks failed: ${failed.join('; ')}`;
}
