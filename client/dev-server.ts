/**
 * The embedded default: a local Temporal dev server with a persistent database under the state
 * folder, its Web UI, and this project's search attributes registered. Reused when one already
 * listens on the address; otherwise started detached, so it outlives the command that started it.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, openSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Connection } from '@temporalio/client';
import { SEARCH_ATTRIBUTES } from '../core/search-attributes';
import { temporalBinary } from './temporal-bin';

export interface DevServerOptions {
  stateDir: string;
  port?: number;
  uiPort?: number;
  namespace?: string;
  /** Keep the server attached to this process (tests) instead of detaching it. */
  attached?: boolean;
}

async function tryConnect(address: string): Promise<Connection | null> {
  try {
    const connection = await Connection.connect({ address, connectTimeout: 1000 });
    await connection.workflowService.getSystemInfo({});
    return connection;
  } catch {
    return null;
  }
}

const KEYWORD = 2; // temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD

/** Registers the search attributes agentRun upserts, if they are missing. */
export async function registerSearchAttributes(connection: Connection, namespace = 'default'): Promise<void> {
  const existing = await connection.operatorService.listSearchAttributes({ namespace });
  const missing = SEARCH_ATTRIBUTES.filter((k) => !(k.name in (existing.customAttributes ?? {})));
  if (missing.length === 0) return;
  await connection.operatorService.addSearchAttributes({
    namespace,
    searchAttributes: Object.fromEntries(missing.map((k) => [k.name, KEYWORD])),
  });
}

export interface DevServer {
  address: string;
  started: boolean;
  pid: number | null;
  stop(): void;
}

export async function ensureDevServer(options: DevServerOptions): Promise<DevServer> {
  const port = options.port ?? 7233;
  const uiPort = options.uiPort ?? 8233;
  const address = `127.0.0.1:${port}`;
  const reused = await tryConnect(address);
  if (reused) {
    await registerSearchAttributes(reused, options.namespace);
    await reused.close();
    return { address, started: false, pid: null, stop: () => undefined };
  }
  mkdirSync(options.stateDir, { recursive: true });
  const log = openSync(join(options.stateDir, 'temporal-server.log'), 'a');
  const args = [
    'server', 'start-dev',
    '--db-filename', join(options.stateDir, 'temporal.db'),
    '--ip', '127.0.0.1',
    '--port', String(port),
    '--ui-port', String(uiPort),
    '--log-level', 'warn',
    ...SEARCH_ATTRIBUTES.flatMap((k) => ['--search-attribute', `${k.name}=Keyword`]),
  ];
  const child = spawn(temporalBinary(), args, { detached: !options.attached, stdio: ['ignore', log, log] });
  if (!options.attached) child.unref();
  writeFileSync(join(options.stateDir, 'temporal-server.pid'), String(child.pid));
  const stop = () => {
    try {
      process.kill(child.pid!, 'SIGTERM');
    } catch {
      // already gone
    }
  };
  for (let i = 0; i < 120; i++) {
    if (child.exitCode !== null) throw new Error(`temporal dev server exited with code ${child.exitCode}; see ${join(options.stateDir, 'temporal-server.log')}`);
    const connection = await tryConnect(address);
    if (connection) {
      await registerSearchAttributes(connection, options.namespace);
      await connection.close();
      return { address, started: true, pid: child.pid ?? null, stop };
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  stop();
  throw new Error(`temporal dev server did not answer on ${address} within 30 s; see ${join(options.stateDir, 'temporal-server.log')}`);
}
