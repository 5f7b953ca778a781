/**
 * `npm run worker`: a standalone worker for the configured cluster (TEMPORAL_ADDRESS or a
 * temporal.toml profile, as the `temporal` CLI reads them), or the embedded dev server when
 * neither gives an address. A connection that cannot be made ends it with one line, exit 2.
 * Started by the command line as the embedded default's background worker, it also stops by
 * itself when another worker of its build is recorded in its place, or when the dev server it
 * serves has ended. Any worker whose version is no longer the deployment's current one (a newer
 * build started) keeps serving the runs pinned to it and exits once the server reports its
 * version drained (docs/versioning.md).
 */
import { readFileSync } from 'node:fs';
import { setFlagsFromString } from 'node:v8';
import { join } from 'node:path';
import type { Runtime } from '@temporalio/worker';
import { readWorkerRecord, recordSelf } from '../host/background-worker';
import { buildId } from '../host/build';
import { ConnectionError, connectTemporal, resolveTarget } from '../host/connection';
import { processAlive } from '../host/processes';
import { embeddedDevServer } from '../host/temporal-server';
import { startTracing } from '../host/tracing';
import { WORKER_NODE_ARGS } from '../host/worker-launch';
import { installRuntime as install } from '../host/runtime';
import { readSettings, type Settings } from '../host/settings';
import { drained, versionName } from './deployment';
import { createWorker, type HostWorkers } from './index';
import { prometheusOptions, snakeCaseMetricTags, watchEventLoop } from './telemetry';

async function main(): Promise<void> {
  // For a worker started without host/worker-launch.ts's options: the threads it starts from here
  // on (the workflow thread, the workspace threads) read the flag when their heap is made.
  for (const flag of WORKER_NODE_ARGS) setFlagsFromString(flag);
  const settings = readSettings();
  const runtime = installRuntime(settings);
  snakeCaseMetricTags(runtime);
  watchEventLoop(runtime.metricMeter);
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
  const drain = drainWatch(settings, worker, () => drained(connection, target.namespace, worker.version));
  try {
    await worker.run(); // ends on SIGINT / SIGTERM, or once drained
  } finally {
    if (watch) clearInterval(watch);
    clearInterval(drain);
    close();
    await tracing?.shutdown();
    // A failure here is said, never in place of the one that ended the worker.
    await connection
      .close()
      .catch((err: unknown) => console.error(`worker ${process.pid}: closing its connection: ${(err as Error).message}`));
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

/**
 * A worker ends once the server reports its version drained: a newer version is current and no
 * open run is pinned to this one. Until then it serves the runs that started on it.
 */
function drainWatch(settings: Settings, worker: HostWorkers, isDrained: () => Promise<boolean>): NodeJS.Timeout {
  let asking = false;
  return setInterval(() => {
    if (asking) return;
    asking = true;
    isDrained()
      .then((yes) => {
        if (!yes) return;
        console.error(`worker ${process.pid}: version ${versionName(worker.version)} has drained (no open run pinned to it); stopping`);
        worker.shutdown();
      })
      // The server unreachable for a moment: asked again at the next check.
      .catch((err: unknown) => console.error(`worker ${process.pid}: drain check failed: ${(err as Error).message}`))
      .finally(() => (asking = false));
  }, settings.drainCheckS * 1000);
}

/**
 * The background worker ends when another worker of its own build is recorded in its place, or its
 * dev server has ended. A worker of another build recorded in its place leaves it running: it
 * serves the runs pinned to its version until they have drained (drainWatch).
 */
function watchdog(settings: Settings, worker: HostWorkers): NodeJS.Timeout {
  let server: number | null = null;
  try {
    server = Number(readFileSync(join(settings.stateDir, 'temporal-server.pid'), 'utf8'));
    if (!processAlive(server)) server = null; // a server this state folder did not start: not watched
  } catch {
    // no pid file: the server was started elsewhere
  }
  let draining = false;
  return setInterval(() => {
    const record = readWorkerRecord(settings.stateDir);
    const replaced = record !== null && record.pid !== process.pid;
    if (server !== null && !processAlive(server)) {
      console.error(`worker ${process.pid}: the dev server has ended; stopping`);
      worker.shutdown();
    } else if (replaced && record.build === worker.version.buildId) {
      console.error(`worker ${process.pid}: replaced by worker ${record.pid}; stopping`);
      worker.shutdown();
    } else if (replaced && !draining) {
      console.error(
        `worker ${process.pid}: replaced by worker ${record.pid} of build ${record.build}; serving the runs pinned to build ${worker.version.buildId} until its version drains`,
      );
      draining = true;
    }
  }, 2000);
}

main().catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(err instanceof ConnectionError ? 2 : 1);
});
