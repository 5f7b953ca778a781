/**
 * The one launcher of `temporal server start-dev` in this project: the embedded default, the test
 * helpers and the benchmarks all start their servers here, with one argument list.
 *
 * Hazard: a stock dev server phones home. Its version check calls a public service at start and
 * then periodically, and its Web UI makes the browser fetch a public news feed. Both are turned
 * off in `devServerArgs`, for every caller; nothing in this project starts a server another way.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, openSync, closeSync } from 'node:fs';
import { join } from 'node:path';
import type { Connection } from '@temporalio/client';
import { connectClient } from './connection';
import { SEARCH_ATTRIBUTES } from '../core/search-attributes';
import { writeFileAtomic } from './files';
import type { Settings } from './settings';
import { temporalBinary } from './temporal-bin';

export interface DevServerOptions {
  /** The `temporal` CLI that serves it (host/temporal-bin.ts finds it from the settings). */
  temporal: string;
  /** Folder of the server's log (and database, unless `dbFile` says otherwise) and pid file. */
  stateDir: string;
  port: number;
  /** The Web UI's port; null starts the server without a Web UI. */
  uiPort: number | null;
  namespace?: string;
  /** The database file; null keeps everything in memory (tests). Default `<stateDir>/temporal.db`. */
  dbFile?: string | null;
  /** Keep the server attached to this process (tests) instead of detaching it. */
  attached?: boolean;
  /** More arguments, e.g. dynamic configuration values a test needs. */
  extraArgs?: string[];
}

/** The arguments of every dev server this project starts. */
export function devServerArgs(o: DevServerOptions): string[] {
  const db = o.dbFile === undefined ? join(o.stateDir, 'temporal.db') : o.dbFile;
  return [
    'server',
    'start-dev',
    ...(db === null ? [] : ['--db-filename', db]),
    '--ip',
    '127.0.0.1',
    '--port',
    String(o.port),
    ...(o.uiPort === null ? ['--headless'] : ['--ui-port', String(o.uiPort)]),
    // No call to the public version service, and no news feed fetched by a browser opening the UI.
    '--dynamic-config-value',
    'frontend.enableServerVersionCheck=false',
    // The history service reads its transfer queue (the activity and workflow tasks a workflow task
    // just scheduled) at most this often per shard; at the stock 20 a task written right after a read
    // waits up to 50 ms before matching sees it, about 40 ms per hop of a sequential run.
    '--dynamic-config-value',
    'history.transferProcessorMaxPollRPS=1000',
    // How soon a version that is no longer current is reported drained once its last pinned run
    // closed (stock: 3 minutes, then a 3-minute grace for visibility): its worker exits then
    // (docs/versioning.md). The dev server's visibility store is written with the run.
    '--dynamic-config-value',
    'matching.wv.VersionDrainageStatusRefreshInterval="5s"',
    '--dynamic-config-value',
    'matching.wv.VersionDrainageStatusVisibilityGracePeriod="5s"',
    '--ui-disable-news-fetch',
    ...(o.namespace && o.namespace !== 'default' ? ['--namespace', o.namespace] : []),
    '--log-level',
    'warn',
    ...SEARCH_ATTRIBUTES.flatMap((k) => ['--search-attribute', `${k.name}=Keyword`]),
    ...(o.extraArgs ?? []),
  ];
}

async function tryConnect(address: string): Promise<Connection | null> {
  try {
    const connection = await connectClient({ address, connectTimeout: 1000 });
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
  /** False when a server already answered on the address and was reused. */
  started: boolean;
  pid: number | null;
  /** Sends SIGTERM (a reused server is left alone). */
  stop(): void;
  /** Resolves when the server this launcher started has exited. */
  exited: Promise<void>;
}

/** Starts a dev server and waits until it answers (at most 30 s). */
export async function startDevServer(o: DevServerOptions): Promise<DevServer> {
  const address = `127.0.0.1:${o.port}`;
  mkdirSync(o.stateDir, { recursive: true });
  const logFile = join(o.stateDir, 'temporal-server.log');
  const log = openSync(logFile, 'a');
  let child: ChildProcess;
  try {
    child = spawn(o.temporal, devServerArgs(o), {
      detached: !o.attached,
      stdio: ['ignore', log, log],
      // The same switch as the dynamic configuration value, for server versions that read only this.
      env: { ...process.env, TEMPORAL_VERSION_CHECK_DISABLED: '1' },
    });
  } finally {
    closeSync(log);
  }
  if (!o.attached) child.unref();
  const exited = new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.once('exit', () => resolve());
  });
  writeFileAtomic(join(o.stateDir, 'temporal-server.pid'), String(child.pid));
  const stop = () => {
    try {
      process.kill(child.pid!, 'SIGTERM');
    } catch {
      // already gone
    }
  };
  for (let i = 0; i < 120; i++) {
    if (child.exitCode !== null) throw new Error(`temporal dev server exited with code ${child.exitCode}; see ${logFile}`);
    const connection = await tryConnect(address);
    if (connection) {
      await registerSearchAttributes(connection, o.namespace);
      await connection.close();
      return { address, started: true, pid: child.pid ?? null, stop, exited };
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  stop();
  throw new Error(`temporal dev server did not answer on ${address} within 30 s; see ${logFile}`);
}

/** The embedded default: reuses a server that answers on the port, else starts one. */
export async function ensureDevServer(o: DevServerOptions): Promise<DevServer> {
  const address = `127.0.0.1:${o.port}`;
  const reused = await tryConnect(address);
  if (reused) {
    await registerSearchAttributes(reused, o.namespace);
    await reused.close();
    return { address, started: false, pid: null, stop: () => undefined, exited: Promise.resolve() };
  }
  return startDevServer(o);
}

/** The embedded default's dev server (persistent, with its Web UI, on the settings' ports), started or reused. */
export function embeddedDevServer(settings: Settings, namespace: string): Promise<DevServer> {
  return ensureDevServer({
    temporal: temporalBinary(settings),
    stateDir: settings.stateDir,
    namespace,
    port: settings.devServerPort,
    uiPort: settings.devUiPort,
  });
}
