/**
 * `npm run worker`: a standalone worker for the configured cluster (TEMPORAL_ADDRESS or a
 * temporal.toml profile, as the `temporal` CLI reads them), or the embedded dev server when
 * neither gives an address. A connection that cannot be made ends it with one line, exit 2.
 * Started by the command line as the embedded default's background worker, it also stops by
 * itself when it is no longer the state folder's recorded worker, or when the dev server it
 * serves has ended.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Runtime } from '@temporalio/worker';
import { readWorkerRecord, recordSelf } from '../host/background-worker';
import { buildId } from '../host/build';
import { ConnectionError, connectTemporal, resolveTarget } from '../host/connection';
import { processAlive } from '../host/processes';
import { embeddedDevServer } from '../host/temporal-server';
import { startTracing } from '../host/tracing';
import { installRuntime as install } from '../host/runtime';
import { readSettings, type Settings } from '../host/settings';
import { createWorker, type HostWorkers } from './index';
import { prometheusOptions, snakeCaseMetricTags } from './telemetry';

async function main(): Promise<void> {
  const settings = readSettings();
  const runtime = installRuntime(settings);
  snakeCaseMetricTags(runtime);
  const target = resolveTarget(settings);
  const address = target.address ?? (await embeddedDevServer(settings, target.namespace)).address;
  const connection = await connectTemporal(address, target);
  const tracing = startTracing(settings, 'coding-agent-worker');
  const { worker, close } = await createWorker({
    connection,
    namespace: target.namespace,
    taskQueue: settings.taskQueue,
    stateDir: settings.stateDir,
    providersFile: settings.providersFile,
    credentialsFile: settings.credentialsFile,
    settings,
    tracing,
  });
  console.error(
    `worker polling task queue ${settings.taskQueue} in namespace ${target.namespace} on ${address} (process ${process.pid}, build ${buildId()}; settings from ${target.origin}; state: ${settings.stateDir})`,
  );
  if (settings.metricsAddress !== null)
    console.error(`worker ${process.pid}: Prometheus metrics on http://${settings.metricsAddress}/metrics`);
  if (tracing !== null) console.error(`worker ${process.pid}: exporting traces to ${settings.otlpEndpoint}/v1/traces`);
  const background = settings.backgroundWorker;
  if (background) recordSelf(settings);
  const watch = background ? watchdog(settings, worker) : null;
  try {
    await worker.run(); // ends on SIGINT / SIGTERM
  } finally {
    if (watch) clearInterval(watch);
    close();
    await tracing?.shutdown();
    await connection.close();
  }
}

/** The runtime, serving the Prometheus endpoint when asked: once per process, for every worker in it. */
function installRuntime(settings: Settings): Runtime {
  if (settings.metricsAddress === null) return install('WARN');
  try {
    return install('WARN', { metrics: prometheusOptions(settings.metricsAddress) });
  } catch (err) {
    throw new Error(`AGENT_METRICS_ADDRESS ${settings.metricsAddress}: ${(err as Error).message}`);
  }
}

/** The background worker ends when another worker is recorded in its place, or its dev server has ended. */
function watchdog(settings: Settings, worker: HostWorkers): NodeJS.Timeout {
  let server: number | null = null;
  try {
    server = Number(readFileSync(join(settings.stateDir, 'temporal-server.pid'), 'utf8'));
    if (!processAlive(server)) server = null; // a server this state folder did not start: not watched
  } catch {
    // no pid file: the server was started elsewhere
  }
  return setInterval(() => {
    const record = readWorkerRecord(settings.stateDir);
    const replaced = record !== null && record.pid !== process.pid;
    if (replaced || (server !== null && !processAlive(server))) {
      console.error(`worker ${process.pid}: ${replaced ? `replaced by worker ${record!.pid}` : 'the dev server has ended'}; stopping`);
      worker.shutdown();
    }
  }, 2000);
}

main().catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(err instanceof ConnectionError ? 2 : 1);
});
