/** A real run folder in a temp directory, prepared from a small repository, for activity tests and the bench. */
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { LocalBackend, type LocalBackendOptions } from '../../sandbox/backends/local';
import { readSettings } from '../../host/settings';
import { hostPath } from '../../host/tools-env';
import { DEFAULT_LIMITS, type Limits } from '../../core/limits';
import { Ledger } from '../../store/ledger';
import type { ToolContext } from '../../tools/context';
import { manifest, manifestDigest, prepareWorkspace, runPaths } from '../../workspace/workspace';
import { fixtureSchema, type Fixture } from '../../core/contracts';

export const PROJECT_ROOT = resolve(__dirname, '..', '..', '..');
/** The settings of this process, read once (a test suite's: jest's global set-up gives them the operator's choices a suite makes). */
export const SETTINGS = readSettings();
/** A local backend with the settings' PATH, as a worker makes it. */
export const localBackend = (options: Omit<LocalBackendOptions, 'path'> = {}) => new LocalBackend({ ...options, path: hostPath(SETTINGS) });
export const LINKCHECK = join(PROJECT_ROOT, 'fixtures', 'linkcheck-nested');

export function linkcheckFixture(): Fixture {
  return fixtureSchema.parse(JSON.parse(readFileSync(join(LINKCHECK, 'fixture.json'), 'utf8')));
}

export function tempDir(prefix: string): string {
  return mkdtempSync(join(tmpdir(), `${prefix}-`));
}

export function writeFiles(root: string, files: Record<string, string>): void {
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), text);
  }
}

export interface TestRun {
  ctx: ToolContext;
  ledger: Ledger;
  workspace: string;
  /** Digest of the workspace manifest: equal before and after means nothing changed. */
  digest(): string;
}

/** `repo` is either a folder to copy or files to create; `before` may add links before preparing. */
export function prepareRun(opts: {
  repo: string | Record<string, string>;
  fixture?: Partial<Fixture>;
  limits?: Partial<Limits>;
  runId?: string;
}): TestRun {
  const state = tempDir('agent-state');
  let repoDir: string;
  if (typeof opts.repo === 'string') repoDir = opts.repo;
  else {
    repoDir = join(tempDir('agent-repo'), 'repo');
    mkdirSync(repoDir);
    writeFiles(repoDir, opts.repo);
  }
  const runId = opts.runId ?? 'run-1';
  const paths = runPaths(state, runId);
  prepareWorkspace(paths, repoDir);
  const ledger = new Ledger(join(state, 'ledger.sqlite'));
  const controller = new AbortController();
  const ctx: ToolContext = {
    runId,
    paths,
    fixture: { ...linkcheckFixture(), ...opts.fixture },
    acceptanceDir: join(LINKCHECK, 'acceptance'),
    baseCommit: null,
    limits: { ...DEFAULT_LIMITS, ...opts.limits },
    ledger,
    backend: localBackend(),
    timeoutMs: 60_000,
    signal: controller.signal,
    heartbeat: () => undefined,
  };
  return { ctx, ledger, workspace: paths.workspace, digest: () => manifestDigest(manifest(paths.workspace)) };
}

/** Ports a test hands to a server of another process are drawn from here up to the kernel's ephemeral range. */
const PORTS_FROM = 10_000;

/** The first port of the kernel's ephemeral range, from which every outgoing connection takes its own. */
const EPHEMERAL_FROM = (() => {
  try {
    return Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]) || 32768;
  } catch {
    return 32768;
  }
})();

/**
 * A loopback port nobody listens on right now, for a server that another process starts (a dev
 * server, its Web UI, a proxy). It is drawn at random below the kernel's ephemeral range: a port
 * the kernel hands out for `listen(0)` comes from that range, where any process's next outgoing
 * connection may take it before the server binds it (a dev server's UI port was taken so, and the
 * server exited).
 */
export async function freePort(): Promise<number> {
  const below = EPHEMERAL_FROM;
  if (below <= PORTS_FROM) throw new Error(`the ephemeral port range starts at ${below}: no room below it from ${PORTS_FROM}`);
  for (let tries = 0; tries < 200; tries++) {
    const port = PORTS_FROM + Math.floor(Math.random() * (below - PORTS_FROM));
    if (await listenable(port)) return port;
  }
  throw new Error(`no free loopback port found between ${PORTS_FROM} and ${below}`);
}

function listenable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}
