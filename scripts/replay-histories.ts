/**
 * Replays on one workflow bundle every history the test suites collect (scripts/support/histories.ts),
 * as the suites append them, and writes the report to `<dir>/report-<bundle>.json` once
 * `<dir>/done` exists and every line is replayed. Jest's global set-up starts one such process per
 * bundle at the lowest CPU priority, so the replays take what the suites leave of the machine;
 * the global tear-down writes `done`, waits, and reports.
 *
 *   node dist/scripts/replay-histories.js <dir> <traced|plain> <pid of the process to follow>
 *
 * When that process is gone without writing `done` (jest interrupted), it stops without a report.
 */
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { buildId } from '../host/build';
import { installRuntime } from '../host/runtime';
import { workflowBundle, type BundleKind } from '../worker';
import { workerTelemetry } from '../worker/telemetry';
import { followSinks, replayLines } from './support/histories';

async function main(): Promise<void> {
  const [dir, bundle, parent] = process.argv.slice(2);
  if (!dir || (bundle !== 'traced' && bundle !== 'plain') || !Number(parent)) {
    console.error('usage: replay-histories.js <dir> <traced|plain> <pid to follow>');
    process.exit(2);
  }
  const alive = () => {
    try {
      process.kill(Number(parent), 0);
      return true;
    } catch {
      return false;
    }
  };
  // A nondeterministic history makes the core warn on every replay of it; the report says it once.
  installRuntime('ERROR');
  const done = join(dir, 'done');
  const lines = followSinks(dir, () => existsSync(done) || !alive());
  const options = { workflowBundle: await workflowBundle(bundle as BundleKind), sinks: workerTelemetry(null).sinks };
  const report = await replayLines(lines, bundle, options, buildId());
  if (existsSync(done)) writeFileSync(join(dir, `report-${bundle}.json`), JSON.stringify(report));
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? (err.stack ?? err.message) : err);
  process.exit(1);
});
