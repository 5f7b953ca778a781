/** Build step: bundles the workflow code once, so workers start without running webpack. */
import { writeFileSync } from 'node:fs';
import { bundleWorkflowCode } from '@temporalio/worker';
import { WORKFLOW_BUNDLE, WORKFLOW_BUNDLE_OPTIONS } from '../worker';

bundleWorkflowCode({ ...WORKFLOW_BUNDLE_OPTIONS, logger: { trace() {}, debug() {}, info() {}, warn() {}, error: console.error, log() {} } })
  .then(({ code }) => writeFileSync(WORKFLOW_BUNDLE, code))
  .catch((err) => {
    console.error(err);
    process.exit(1);
  });
