/**
 * A command's connection to Temporal. With TEMPORAL_ADDRESS set it connects there and expects
 * workers on that cluster. Without it (the embedded default) it starts or reuses the local dev
 * server, and runs a worker in this process while it follows a run, so the run makes progress.
 */
import { spawn } from 'node:child_process';
import { existsSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Runtime } from '@temporalio/worker';
import { createWorker, type HostWorkers } from '../worker';
import { runtimeLogger } from '../worker/logger';
import { readSettings, type Settings } from '../worker/settings';
import { ensureDevServer } from './dev-server';

export interface Session {
  settings: Settings;
  client: Client;
  address: string;
  embedded: boolean;
  /** Runs `fn` with a worker in this process (embedded default only). */
  withWorker<T>(fn: () => Promise<T>): Promise<T>;
  /** Starts a detached background worker unless the one it started before is alive (embedded only). */
  ensureBackgroundWorker(): Promise<boolean>;
  close(): Promise<void>;
}

export async function openSession(settings: Settings = readSettings()): Promise<Session> {
  Runtime.install({ logger: runtimeLogger('WARN') });
  const embedded = settings.temporalAddress === null;
  const address = embedded ? (await ensureDevServer({ stateDir: settings.stateDir, namespace: settings.namespace, port: settings.devServerPort, uiPort: settings.devUiPort })).address : settings.temporalAddress!;
  const connection = await Connection.connect({ address });
  const client = new Client({ connection, namespace: settings.namespace });

  return {
    settings,
    client,
    address,
    embedded,
    async withWorker<T>(fn: () => Promise<T>): Promise<T> {
      if (!embedded) return fn();
      const nativeConnection = await NativeConnection.connect({ address });
      let worker: HostWorkers | null = null;
      const created = await createWorker({ connection: nativeConnection, namespace: settings.namespace, taskQueue: settings.taskQueue, stateDir: settings.stateDir });
      worker = created.worker;
      try {
        return await worker.runUntil(fn);
      } finally {
        created.close();
        await nativeConnection.close();
      }
    },
    async ensureBackgroundWorker(): Promise<boolean> {
      if (!embedded) return false;
      const pidFile = join(settings.stateDir, 'worker.pid');
      if (existsSync(pidFile) && alive(Number(readFileSync(pidFile, 'utf8')))) return false;
      const log = openSync(join(settings.stateDir, 'worker.log'), 'a');
      const child = spawn(process.execPath, [join(__dirname, '..', 'worker', 'main.js')], { detached: true, stdio: ['ignore', log, log], env: process.env });
      writeFileSync(pidFile, String(child.pid));
      child.unref();
      return true;
    },
    async close() {
      await connection.close();
    },
  };
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
