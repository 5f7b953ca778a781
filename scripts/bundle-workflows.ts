/** Build step: bundles the workflow code once for each kind of worker, so workers start without running webpack. */
import { writeFileSync } from 'node:fs';
import { bundleWorkflowCode } from '@temporalio/worker';
import { quietLogger, WORKFLOW_BUNDLES, workflowBundleOptions, type BundleKind } from '../worker';

async function main(): Promise<void> {
  for (const kind of Object.keys(WORKFLOW_BUNDLES) as BundleKind[]) {
    const { code } = await bundleWorkflowCode({ ...workflowBundleOptions(kind), logger: quietLogger });
    writeFileSync(WORKFLOW_BUNDLES[kind], code);
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
