/**
 * A command's connection to Temporal. With TEMPORAL_ADDRESS set it connects there and expects
 * workers on that cluster. Without it (the embedded default) it starts or reuses the local dev
 * server, and runs a worker in this process when the task queue has no poller, so queries and
 * runs make progress.
 */
import { spawn } from 'node:child_process';
import { openSync } from 'node:fs';
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime, type Worker } from '@temporalio/worker';
import { createWorker } from '../worker';
import { readSettings, type Settings } from '../worker/settings';
import { ensureDevServer } from './dev-server';

export interface Session {
  settings: Settings;
  client: Client;
  address: string;
  embedded: boolean;
  /** Runs `fn` with a worker in this process when no other worker polls the task queue. */
  withWorker<T>(fn: () => Promise<T>): Promise<T>;
  /** Starts a detached background worker when no worker polls the task queue (embedded only). */
  ensureBackgroundWorker(): Promise<boolean>;
  close(): Promise<void>;
}

export async function openSession(settings: Settings = readSettings()): Promise<Session> {
  Runtime.install({ logger: new DefaultLogger('WARN') });
  const embedded = settings.temporalAddress === null;
  const address = embedded ? (await ensureDevServer({ stateDir: settings.stateDir, namespace: settings.namespace, port: settings.devServerPort, uiPort: settings.devUiPort })).address : settings.temporalAddress!;
  const connection = await Connection.connect({ address });
  const client = new Client({ connection, namespace: settings.namespace });

  const hasPoller = async (): Promise<boolean> => {
    const response = await connection.workflowService.describeTaskQueue({
      namespace: settings.namespace,
      taskQueue: { name: settings.taskQueue, kind: 1 /* NORMAL */ },
      taskQueueType: 1 /* WORKFLOW */,
    });
    return (response.pollers ?? []).length > 0;
  };

  return {
    settings,
    client,
    address,
    embedded,
    async withWorker<T>(fn: () => Promise<T>): Promise<T> {
      if (!embedded || (await hasPoller())) return fn();
      const nativeConnection = await NativeConnection.connect({ address });
      let worker: Worker | null = null;
      const created = await createWorker({ connection: nativeConnection, namespace: settings.namespace, taskQueue: settings.taskQueue, stateDir: settings.stateDir });
      worker = created.worker;
      try {
        return await worker.runUntil(fn);
      } finally {
        created.ledger.close();
        await nativeConnection.close();
      }
    },
    async ensureBackgroundWorker(): Promise<boolean> {
      if (!embedded || (await hasPoller())) return false;
      const log = openSync(join(settings.stateDir, 'worker.log'), 'a');
      const child = spawn(process.execPath, [join(__dirname, '..', 'worker', 'main.js')], { detached: true, stdio: ['ignore', log, log], env: process.env });
      child.unref();
      return true;
    },
    async close() {
      await connection.close();
    },
  };
}
