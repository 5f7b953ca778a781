/** `npm run worker`: a standalone worker for the configured cluster (or the embedded dev server). */
import { NativeConnection, Runtime } from '@temporalio/worker';
import { runtimeLogger } from './logger';
import { ensureDevServer } from '../client/dev-server';
import { readSettings } from './settings';
import { createWorker } from './index';

async function main(): Promise<void> {
  Runtime.install({ logger: runtimeLogger('WARN') });
  const settings = readSettings();
  const address = settings.temporalAddress ?? (await ensureDevServer({ stateDir: settings.stateDir, port: settings.devServerPort, uiPort: settings.devUiPort })).address;
  const connection = await NativeConnection.connect({ address });
  const { worker, close } = await createWorker({ connection, namespace: settings.namespace, taskQueue: settings.taskQueue, stateDir: settings.stateDir });
  console.error(`worker polling task queue ${settings.taskQueue} on ${address} (state: ${settings.stateDir})`);
  try {
    await worker.run(); // ends on SIGINT / SIGTERM
  } finally {
    close();
    await connection.close();
  }
}

main().catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
