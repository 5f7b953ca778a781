/** Run folders, temp folders and the project's paths: shared with the scripts (scripts/support/run-dir.ts). */
import { createSandbox } from '../../worker/sandbox';
import { SETTINGS } from '../../scripts/support/run-dir';

export * from '../../scripts/support/run-dir';

/** Fails, saying what to run, unless the docker sandbox of the settings probes as isolated. */
export async function requireDockerSandbox(): Promise<void> {
  const evidence = await createSandbox({}, SETTINGS).isolation();
  if (!evidence.verified)
    throw new Error(`docker sandbox not usable (${evidence.reason_detail ?? 'probe failed'}); run scripts/ensure-docker.sh`);
}
