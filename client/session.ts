/**
 * A command's connection to Temporal, resolved like the `temporal` CLI's (host/connection.ts):
 * an address from TEMPORAL_ADDRESS or the selected profile of the config file means a cluster,
 * whose workers serve the runs. No address anywhere (the embedded default) means the local dev
 * server, started or reused, with the state folder's one background worker (host/background-worker.ts).
 */
import { Client } from '@temporalio/client';
import { connectTemporal, resolveTarget } from '../host/connection';
import { embeddedDevServer } from '../host/temporal-server';
import { startTracing } from '../host/tracing';
import { TracingClientInterceptor } from './tracing';
import { ensureBackgroundWorker, type EnsuredWorker } from '../host/background-worker';
import { installRuntime } from '../host/runtime';
import type { Settings } from '../host/settings';

export interface Session {
  settings: Settings;
  client: Client;
  address: string;
  /** The namespace of the connection (TEMPORAL_NAMESPACE, else the profile's, else `default`). */
  namespace: string;
  embedded: boolean;
  /** The Web UI runs link to: the embedded server's own, else the settings' `webUiUrl` (null: no links). */
  webUi: string | null;
  /**
   * Embedded default: the state folder's background worker, running this build with this
   * shell's provider variables (reused when it does, replaced otherwise). Null on a cluster.
   */
  ensureWorker(): Promise<EnsuredWorker | null>;
  close(): Promise<void>;
}

/** Opens the connection; a configuration or connection fault throws a ConnectionError (one line, exit 2). */
export async function openSession(settings: Settings): Promise<Session> {
  installRuntime('WARN');
  const target = resolveTarget(settings);
  const embedded = target.address === null;
  const address = target.address ?? (await embeddedDevServer(settings, target.namespace)).address;
  const connection = await connectTemporal(address, target);
  const tracing = startTracing(settings, 'coding-agent-cli');
  const client = new Client({
    connection,
    namespace: target.namespace,
    ...(tracing ? { interceptors: { workflow: [new TracingClientInterceptor()] } } : {}),
  });
  let ensured: Promise<EnsuredWorker> | null = null;
  return {
    settings,
    client,
    address,
    namespace: target.namespace,
    embedded,
    webUi: embedded ? `http://localhost:${settings.devUiPort}` : settings.webUiUrl,
    async ensureWorker() {
      if (!embedded) return null;
      ensured ??= ensureBackgroundWorker(settings).then((w) => {
        if (w.action !== 'reused')
          process.stderr.write(
            `${w.action} the background worker ${w.record.pid} (build ${w.record.build})${w.why ? `: the previous one was replaced because ${w.why}` : ''}; log in the state folder: worker.log\n`,
          );
        return w;
      });
      return ensured;
    },
    async close() {
      await tracing?.shutdown();
      await connection.close();
    },
  };
}
