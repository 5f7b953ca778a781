/**
 * The Temporal servers the server-fault suites kill and the bench compares, and the network
 * between a worker and one:
 * the dev server (`temporal server start-dev`) on a database file, a cluster made by
 * scripts/ensure-cluster.sh (the server built from its Go module, PostgreSQL, SQL visibility) in
 * a temp folder of its own, and Toxiproxy in front of a frontend. All on loopback; every process
 * started here ends with `close()`.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Client, type Connection } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { connectClient } from '../../host/connection';
import { startDevServer, type DevServer } from '../../host/temporal-server';
import { temporalBinary } from '../../host/temporal-bin';
import { freePort, PROJECT_ROOT, SETTINGS, tempDir } from './run-dir';
import { quietRuntime, testEnvironment } from './temporal';
import { collectHistories } from './histories';

const run = promisify(execFile);

export type ServerKind = 'dev' | 'cluster';

export interface ServerUnderTest {
  kind: ServerKind;
  /** The frontend's address (`127.0.0.1:port`). */
  address: string;
  /** A client of the test's own, directly on the frontend (starts and results). */
  client: Client;
  /** SIGKILL the server (every process of it) and wait until it is gone. */
  kill(): Promise<void>;
  /** Start it again on the same data; resolves when its frontend answers. */
  start(): Promise<void>;
  /** The cluster's PostgreSQL stopped (fast shutdown) and started again. */
  restartDb(): Promise<void>;
  /** Everything it started, ended (its workflow histories collected first when a sink is set: ./histories.ts). */
  close(): Promise<void>;
}

/** The cluster's binaries, built and cached by scripts/test-setup.sh (scripts/ensure-cluster.sh build). */
export const CLUSTER_BIN = join(SETTINGS.stateDir, 'cluster', 'bin');

export function clusterBuilt(): boolean {
  return ['temporal-server', 'temporal-sql-tool', 'toxiproxy-server'].every((b) => existsSync(join(CLUSTER_BIN, b)));
}

async function clientOf(address: string): Promise<{ client: Client; connection: Connection }> {
  const connection = await connectClient({ address });
  return { client: new Client({ connection }), connection };
}

/** The dev server on a database file in a temp folder, killed and started again on the same port and file. */
export async function devServer(): Promise<ServerUnderTest> {
  const stateDir = tempDir('temporal-dev');
  const options = {
    temporal: temporalBinary(SETTINGS),
    stateDir,
    port: await freePort(),
    uiPort: null,
    dbFile: join(stateDir, 'temporal.db'),
    attached: true,
  };
  let server: DevServer | null = await startDevServer(options);
  const { client, connection } = await clientOf(server.address);
  const kill = async () => {
    if (server === null) return;
    const s = server;
    server = null;
    try {
      process.kill(s.pid!, 'SIGKILL');
    } catch {
      // already gone
    }
    await s.exited;
  };
  return {
    kind: 'dev',
    address: `127.0.0.1:${options.port}`,
    client,
    kill,
    start: async () => {
      if (server === null) server = await startDevServer(options);
    },
    restartDb: () => Promise.reject(new Error('the dev server has no separate database to restart')),
    close: async () => {
      if (server !== null) await collectHistories(`127.0.0.1:${options.port}`);
      await connection.close().catch(() => undefined);
      await kill();
    },
  };
}

/** Whether every port of `ports` can be bound on loopback now. */
async function allFree(ports: number[]): Promise<boolean> {
  for (const port of ports) {
    const ok = await new Promise<boolean>((resolve) => {
      const s = createServer();
      s.once('error', () => resolve(false));
      s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
    });
    if (!ok) return false;
  }
  return true;
}

/** A base port whose cluster ports (base..base+6, base+100..base+106) are all free. */
async function clusterPorts(): Promise<number> {
  for (let i = 0; i < 50; i++) {
    // Below 32,768: the cluster keeps membership ports in a PostgreSQL smallint.
    const base = 20_000 + Math.floor(Math.random() * 120) * 100 + 10;
    const ports = [0, 1, 2, 3, 6, 100, 101, 102, 106].map((d) => base + d);
    if (await allFree(ports)) return base;
  }
  throw new Error('no free block of ports for a cluster on loopback');
}

/** A pid that no longer runs (gone, or a zombie nobody has reaped yet). */
function ended(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return true;
  }
  try {
    return /^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return true;
  }
}

/**
 * A cluster of its own in a temp folder (scripts/ensure-cluster.sh start): PostgreSQL with the
 * default store and SQL visibility, the Temporal server on free loopback ports. `dynamicConfig`:
 * more of the server's dynamic configuration (`key: value` each), as a suite's dev server gets it.
 */
export async function cluster(dynamicConfig: Record<string, string | number> = {}): Promise<ServerUnderTest> {
  if (!clusterBuilt())
    throw new Error(`the cluster's binaries are missing in ${CLUSTER_BIN}: run scripts/test-setup.sh (or scripts/ensure-cluster.sh build)`);
  const dir = tempDir('temporal-cluster');
  chmodSync(dir, 0o755); // PostgreSQL runs as its own user when the tests run as root
  const port = await clusterPorts();
  const config = join(dir, 'more-dynamic-config.yaml');
  writeFileSync(
    config,
    Object.entries(dynamicConfig)
      .map(([key, value]) => `${key}:\n  - value: ${value}\n`)
      .join(''),
  );
  const env = {
    ...process.env,
    AGENT_CLUSTER_DYNAMIC_CONFIG: config,
    AGENT_CLUSTER_DIR: dir,
    AGENT_CLUSTER_BIN: CLUSTER_BIN,
    AGENT_CLUSTER_PORT: String(port),
    AGENT_CLUSTER_PG_PORT: String(await freePort()),
    TEMPORAL_BIN: temporalBinary(SETTINGS),
  };
  const script = (command: string) => run('bash', [join(PROJECT_ROOT, 'scripts', 'ensure-cluster.sh'), command], { env, timeout: 180_000 });
  const serverPid = () => {
    try {
      return Number(readFileSync(join(dir, 'server.pid'), 'utf8'));
    } catch {
      return null;
    }
  };
  try {
    await script('start');
  } catch (err) {
    await script('stop').catch(() => undefined);
    throw new Error(`the cluster did not start: ${((err as Error & { stderr?: string }).stderr ?? (err as Error).message).slice(-3000)}`);
  }
  const address = `127.0.0.1:${port}`;
  const { client, connection } = await clientOf(address);
  return {
    kind: 'cluster',
    address,
    client,
    kill: async () => {
      const pid = serverPid();
      await script('kill-server');
      for (let i = 0; pid !== null && !ended(pid); i++) {
        if (i > 300) throw new Error(`the cluster's server ${pid} still runs 30 s after SIGKILL`);
        await new Promise((r) => setTimeout(r, 100));
      }
    },
    start: async () => {
      await script('start-server');
    },
    restartDb: async () => {
      await script('restart-db');
    },
    close: async () => {
      if (serverPid() !== null && !ended(serverPid()!)) await collectHistories(address);
      await connection.close().catch(() => undefined);
      await script('stop');
    },
  };
}

export const startBackend = (kind: ServerKind) => (kind === 'dev' ? devServer() : cluster());

/** A test environment on `server`: its client and native connection; its teardown closes the server. */
export async function environmentOf(server: ServerUnderTest): Promise<TestWorkflowEnvironment> {
  quietRuntime();
  const env = await testEnvironment(server.address).catch(async (err: unknown) => {
    await server.close();
    throw err;
  });
  const teardown = env.teardown.bind(env);
  env.teardown = async () => {
    try {
      await teardown();
    } finally {
      await server.close();
    }
  };
  return env;
}

/** A cluster of its own (see `cluster`) as a suite's test environment; its teardown stops the cluster. */
export const clusterEnvironment = async (dynamicConfig: Record<string, string | number> = {}) =>
  environmentOf(await cluster(dynamicConfig));

/** Toxiproxy between a worker and a frontend: the worker connects to `address`. */
export interface NetworkLink {
  address: string;
  /**
   * The link goes down: the connections open now are reset (the server sees its worker's polls
   * end), and from then on nothing passes either way on new ones (they open and hang).
   */
  cut(): Promise<void>;
  /** Traffic passes again; the connections opened during the cut are reset, as a middlebox that lost their bytes would. */
  heal(): Promise<void>;
  /** Every chunk each way delayed by `ms` (± `jitter`), or the delay removed with null. */
  latency(ms: number | null, jitter?: number): Promise<void>;
  close(): Promise<void>;
}

/** A toxiproxy-server of this test on free loopback ports, with one proxy to `upstream`. */
export async function networkLink(upstream: string): Promise<NetworkLink> {
  const apiPort = await freePort();
  const listen = `127.0.0.1:${await freePort()}`;
  const child: ChildProcess = spawn(join(CLUSTER_BIN, 'toxiproxy-server'), ['-host', '127.0.0.1', '-port', String(apiPort)], {
    detached: true, // its own process group, killed whole
    stdio: 'ignore',
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const api = async (method: string, path: string, body?: object) => {
    const res = await fetch(`http://127.0.0.1:${apiPort}${path}`, {
      method,
      headers: body ? { 'content-type': 'application/json' } : {},
      body: body ? JSON.stringify(body) : undefined,
    });
    if (!res.ok && res.status !== 404) throw new Error(`toxiproxy ${method} ${path}: ${res.status} ${await res.text()}`);
  };
  const close = async () => {
    try {
      process.kill(-child.pid!, 'SIGKILL');
    } catch {
      // already gone
    }
    await exited;
  };
  try {
    for (let i = 0; ; i++) {
      try {
        await api('GET', '/version');
        break;
      } catch (err) {
        if (i > 100) throw err;
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    await api('POST', '/proxies', { name: 'temporal', listen, upstream, enabled: true });
  } catch (err) {
    await close();
    throw err;
  }
  const toxic = (name: string, type: string, stream: string, attributes: object) =>
    api('POST', '/proxies/temporal/toxics', { name, type, stream, toxicity: 1, attributes });
  // Disabling a proxy closes its connections; enabled again, it keeps its toxics.
  const reset = async () => {
    await api('POST', '/proxies/temporal', { enabled: false });
    await api('POST', '/proxies/temporal', { enabled: true });
  };
  return {
    address: listen,
    cut: async () => {
      await toxic('cut-up', 'timeout', 'upstream', { timeout: 0 });
      await toxic('cut-down', 'timeout', 'downstream', { timeout: 0 });
      await reset();
    },
    heal: async () => {
      await api('DELETE', '/proxies/temporal/toxics/cut-up');
      await api('DELETE', '/proxies/temporal/toxics/cut-down');
      await reset();
    },
    latency: async (ms, jitter = 0) => {
      await api('DELETE', '/proxies/temporal/toxics/slow-up');
      await api('DELETE', '/proxies/temporal/toxics/slow-down');
      if (ms === null) return;
      await toxic('slow-up', 'latency', 'upstream', { latency: ms, jitter });
      await toxic('slow-down', 'latency', 'downstream', { latency: ms, jitter });
    },
    close,
  };
}
