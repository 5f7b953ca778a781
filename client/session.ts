/**
 * A command's connection to Temporal. With TEMPORAL_ADDRESS set it connects there and expects
 * workers on that cluster. Without it (the embedded default) it starts or reuses the local dev
 * server, and the state folder's one background worker (worker/background.ts) serves the runs.
 */
import { Client, Connection } from '@temporalio/client';
import { Runtime } from '@temporalio/worker';
import { ensureDevServer } from '../host/temporal-server';
import { startTracing } from '../host/tracing';
import { TracingClientInterceptor } from './tracing';
import { ensureBackgroundWorker, type EnsuredWorker } from '../worker/background';
import { runtimeLogger } from '../worker/logger';
import { readSettings, type Settings } from '../host/settings';

export interface Session {
  settings: Settings;
  client: Client;
  address: string;
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

export async function openSession(settings: Settings = readSettings()): Promise<Session> {
  Runtime.install({ logger: runtimeLogger('WARN') });
  const embedded = settings.temporalAddress === null;
  const address = embedded
    ? (await ensureDevServer({ stateDir: settings.stateDir, namespace: settings.namespace, port: settings.devServerPort, uiPort: settings.devUiPort })).address
    : settings.temporalAddress!;
  const connection = await Connection.connect({ address });
  const tracing = startTracing(settings, 'coding-agent-cli');
  const client = new Client({ connection, namespace: settings.namespace, ...(tracing ? { interceptors: { workflow: [new TracingClientInterceptor()] } } : {}) });
  let ensured: Promise<EnsuredWorker> | null = null;
  return {
    settings,
    client,
    address,
    embedded,
    webUi: embedded ? `http://localhost:${settings.devUiPort}` : settings.webUiUrl,
    async ensureWorker() {
      if (!embedded) return null;
      ensured ??= ensureBackgroundWorker(settings).then((w) => {
        if (w.action !== 'reused') process.stderr.write(`${w.action} the background worker ${w.record.pid} (build ${w.record.build})${w.why ? `: the previous one was replaced because ${w.why}` : ''}; log in the state folder: worker.log\n`);
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
