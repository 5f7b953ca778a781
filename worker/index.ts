/**
 * Builds a worker for agentRun with real dependencies: the SQLite ledger under the state folder,
 * the local backend, the docker backend with its isolation evidence, and the pre-built workflow
 * bundle when there is one.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { z } from 'zod';
import type { PriceTable } from '../models/live';
import { formatIssues } from '../core/validate';
import { dirname, join, resolve, sep } from 'node:path';
import { NativeConnection, Worker, bundleWorkflowCode, type WorkflowBundleOption } from '@temporalio/worker';
import { createActivities, type ActivityDeps } from '../activities';
import type { Activities } from '../core/activities';
import { armFault } from '../host/faults';
import { buildId, workerIdentity } from '../host/build';
import { writeFileAtomic } from '../host/files';
import { readCredential, readSettings, type Settings } from '../host/settings';
import { hostPath } from '../host/tools-env';
import { LocalBackend } from '../sandbox/backends/local';
import type { ExecBackend } from '../sandbox/backends/types';
import { DEFAULT_LIMITS, type Limits } from '../core/limits';
import { hostLedger, type Ledger } from '../store/ledger';
import { hostStore, type Store } from '../store/store';
import { PayloadSizeGuard } from './payload-guard';
import { becomeCurrent, deploymentOptions } from './deployment';
import type { WorkerDeploymentVersion } from '@temporalio/common';
import { repositoryRunners } from '../sandbox/git-sandbox';
import { createSandbox, type Sandbox, type SandboxOptions } from './sandbox';
import { workerTelemetry } from './telemetry';
import type { Tracing } from '../host/tracing';

const priceTableSchema = z.record(
  z.string(),
  z.strictObject({
    input: z.number().min(0),
    output: z.number().min(0),
    cached_input: z.number().min(0).optional(),
    cache_write_input: z.number().min(0).optional(),
  }),
);

/**
 * The two workflow bundles the build makes (scripts/bundle-workflows.ts): the traced one, with
 * OpenTelemetry's workflow interceptors (workflows/interceptors.ts), for a worker that exports
 * traces, and the plain one, with no OpenTelemetry code, for every other worker. Each new workflow
 * instantiates the bundle's modules again, so the plain bundle saves a worker that exports nothing
 * those modules' memory and CPU (docs/benchmarks.md). The workflow code is the same in both and the
 * interceptors add no command; their yields are gated by SDK flags that the SDK version recorded in
 * the history turns on, so a run can move between a traced and a plain worker
 * (tests/replay-histories.test.ts and tests/traces.test.ts replay across both).
 */
export const WORKFLOW_BUNDLES = {
  traced: join(__dirname, '..', 'workflow-bundle.js'),
  plain: join(__dirname, '..', 'workflow-bundle-plain.js'),
};
export type BundleKind = keyof typeof WORKFLOW_BUNDLES;

/**
 * Modules loaded once per workflow thread and shared by every workflow in it (the SDK's
 * `preloadModules`, with everything they import, zod included); every other module is
 * instantiated again for each workflow in the cache, and again each time an evicted run is
 * replayed. Shared: every core/ module the workflow code reaches (`coreModulesOf`).
 * zod and the schemas built at the module scope of core/ cost about 1.8 MB per workflow
 * otherwise (measured: 1,905 KiB per cached agentRun, 92 KiB with core/contracts and core/validate
 * shared); the rest of core/ another 180 KiB per workflow (docs/benchmarks.md, "tenth round").
 * Hazard: a module listed here (and everything it imports) must keep no state at its module
 * scope, since one instance serves every workflow of the thread; the SDK deep-freezes its
 * exports. core/ is pure by rule; nothing from @temporalio/workflow belongs here. The traced
 * bundle adds workflows/trace-context.ts, whose one state is on purpose: the thread's storage of
 * trace contexts.
 * workflows/stack-traces.ts is the one module kept for its effect: the sandbox's stack format.
 */
export function sharedWorkflowModules(kind: BundleKind = 'plain'): string[] {
  const entries = [require.resolve('../workflows'), ...interceptorModules(kind)];
  // First: it sets the sandbox's Error.prepareStackTrace before the SDK freezes the globals.
  const shared = [require.resolve('../workflows/stack-traces'), ...coreModulesOf(entries)];
  return kind === 'traced' ? [...shared, require.resolve('../workflows/trace-context')] : shared;
}

const interceptorModules = (kind: BundleKind) => (kind === 'traced' ? [require.resolve('../workflows/interceptors')] : []);

/** The core/ modules that the given compiled modules reach through relative imports, in a stable order. */
function coreModulesOf(entries: string[]): string[] {
  const core = join(__dirname, '..', 'core') + sep;
  const seen = new Set<string>();
  const visit = (file: string): void => {
    if (seen.has(file)) return;
    seen.add(file);
    for (const [, spec] of readFileSync(file, 'utf8').matchAll(/require\("(\.\.?\/[^"]+)"\)/g)) {
      visit(require.resolve(resolve(dirname(file), spec!)));
    }
  };
  entries.forEach(visit);
  return [...seen].filter((file) => file.startsWith(core)).sort();
}

/** How a workflow bundle is made, here and by the build: a pre-built bundle holds its interceptors itself. */
export function workflowBundleOptions(kind: BundleKind) {
  return {
    workflowsPath: require.resolve('../workflows'),
    preloadModules: sharedWorkflowModules(kind),
    workflowInterceptorModules: interceptorModules(kind),
  };
}

const bundles = new Map<BundleKind, Promise<WorkflowBundleOption>>();

/** The workflow code, bundled once per process (or read from the build's pre-built bundle). */
export function workflowBundle(kind: BundleKind): Promise<WorkflowBundleOption> {
  if (existsSync(WORKFLOW_BUNDLES[kind])) return Promise.resolve({ codePath: WORKFLOW_BUNDLES[kind] });
  let bundle = bundles.get(kind);
  if (bundle === undefined) {
    bundle = bundleWorkflowCode({ ...workflowBundleOptions(kind), logger: quietLogger });
    bundles.set(kind, bundle);
  }
  return bundle;
}

/** The bundler's logger wherever workflow code is bundled: its errors only. */
export const quietLogger = { trace() {}, debug() {}, info() {}, warn() {}, error: (m: string) => console.error(m), log() {} };

export interface WorkerOptions {
  connection: NativeConnection;
  namespace?: string;
  taskQueue: string;
  stateDir: string;
  /** The operator's providers file (default `<stateDir>/providers.json`). */
  providersFile?: string;
  /** The operator's setup credentials file (default `<stateDir>/credentials.json`). */
  credentialsFile?: string;
  limits?: Partial<Limits>;
  /**
   * The docker backend (default: the settings' image and engine). `false`: no docker backend, so
   * docker runs end `isolation_unverified` / `runtime_unavailable`.
   */
  docker?: SandboxOptions | false;
  /** Timeout of one provider HTTP request (default 120 s). */
  modelTimeoutMs?: number;
  /**
   * Workflows kept in this worker's cache (default: the settings', 100). A run waiting for a
   * person is evicted when the cache is full and replayed from history when its Signal arrives,
   * so parked runs cost the worker no memory.
   */
  maxCachedWorkflows?: number;
  /**
   * Poll the shared queue (new runs and every workflow task) as well as this host's own (default).
   * false: serve only the activities of the runs this host holds, e.g. a host being drained; its
   * runs' workflow tasks then go to other hosts, whose read-only steps come back here.
   */
  sharedQueue?: boolean;
  /**
   * The environment's settings (host/settings.ts) for everything the options above leave open:
   * prices, cache size, sandbox image and engine, provider base URLs, PATH, the fault point.
   * Default: read from the environment when the worker is created.
   */
  settings?: Settings;
  /** Wraps each execution backend (the benchmark times test processes this way). */
  wrapBackend?: (backend: ExecBackend) => ExecBackend;
  /** Wraps the activities (a test holds a step back this way, to send a message while it runs). */
  wrapActivities?: (activities: Activities) => Activities;
  /** This process's tracing (host/tracing.ts), or none: spans of workflows and activities go nowhere. */
  tracing?: Tracing | null;
}

/** The price table (US dollars per million tokens by model), or none: costs are then null, never guessed. */
function loadPrices(file: string | null): PriceTable {
  if (file === null) return {};
  const parsed = priceTableSchema.safeParse(JSON.parse(readFileSync(file, 'utf8')));
  if (!parsed.success) throw new Error(`AGENT_PRICES_FILE ${file}: ${formatIssues(parsed.error)}`);
  return parsed.data;
}

/**
 * The two workers of one host: the shared queue hands out new runs (workflow tasks and each
 * run's first activity); the host's own queue takes every later activity of the runs it holds.
 */
export interface HostWorkers {
  /** Polls until shut down; makes this version the deployment's current one once the server has seen it poll. */
  run(): Promise<void>;
  /** Polls while `fn` runs, which starts once this version is the deployment's current one. */
  runUntil<T>(fn: () => Promise<T>): Promise<T>;
  shutdown(): void;
  /** The Worker Deployment version both workers poll as (docs/versioning.md). */
  version: WorkerDeploymentVersion;
}

export interface HarnessWorker {
  worker: HostWorkers;
  /** This host's own task queue (`<task queue>@<host id>`). */
  hostQueue: string;
  ledger: Ledger;
  store: Store;
  /** Closes the ledger and the store (after the worker has stopped). */
  close(): void;
}

export async function createWorker(options: WorkerOptions): Promise<HarnessWorker> {
  const settings = options.settings ?? readSettings();
  armFault(settings.fault, settings.faultHoldMs, settings.faultCount, settings.faultDelayMs);
  mkdirSync(options.stateDir, { recursive: true });
  const limits: Limits = {
    ...DEFAULT_LIMITS,
    workspaceBytes: settings.workspaceBytes,
    newFiles: settings.repositoryLimits.new_files,
    ...options.limits,
  };
  // Built before the ledger opens, so a malformed DOCKER_HOST fails with nothing to close.
  const sandbox =
    options.docker === false
      ? null
      : createSandbox({ ...options.docker, limits: { fileBytes: limits.workspaceBytes, ...options.docker?.limits } }, settings);
  const hostQueue = `${options.taskQueue}@${hostId(options.stateDir)}`;
  const ledger = hostLedger(options.stateDir);
  const store = hostStore(options.stateDir);
  const made = createActivities({ ...activityWiring({ ...options, limits }, settings, sandbox, hostQueue), ledger, store });
  const activities = options.wrapActivities ? options.wrapActivities(made) : made;
  const worker = await temporalWorkers(options, settings, activities, hostQueue);
  // The probe runs when the worker starts, in the background; a run on the docker backend waits
  // for it (or probes again if it found no engine).
  sandbox?.warmUp();
  return {
    worker,
    hostQueue,
    ledger,
    store,
    close() {
      ledger.close();
      store.close();
    },
  };
}

/** The activities' configuration and backends from the worker's settings (everything but the ledger and store). */
function activityWiring(
  options: WorkerOptions,
  settings: Settings,
  sandbox: Sandbox | null,
  hostQueue: string,
): Omit<ActivityDeps, 'ledger' | 'store'> {
  const local = new LocalBackend({ path: hostPath(settings) });
  // No local backend unless the operator allows it: loadRun refuses local runs, and no activity can start a host process.
  const backends = { ...(settings.allowLocal ? { local } : {}), ...(sandbox ? { docker: sandbox.backend } : {}) };
  return {
    config: {
      stateDir: options.stateDir,
      repositoryLimits: settings.repositoryLimits,
      allowedImages: settings.allowedImages,
      providersFile: options.providersFile ?? join(options.stateDir, 'providers.json'),
      credentialsFile: options.credentialsFile ?? join(options.stateDir, 'credentials.json'),
      promptsDir: settings.promptsDir,
      limits: { ...DEFAULT_LIMITS, ...options.limits },
      diskFullWaitMs: settings.diskFullWaitS * 1000,
      prices: loadPrices(settings.pricesFile),
      maxBudgets: settings.maxBudgets,
      modelTimeoutMs: options.modelTimeoutMs,
      hostQueue,
      traces: (options.tracing ?? null) !== null,
      baseUrls: { openai: settings.openaiBaseUrl, anthropic: settings.anthropicBaseUrl },
      // Read at each call, never kept: see readCredential.
      credential: (name) => readCredential(name),
    },
    repositories: repositoryRunners({
      docker: sandbox?.backend.engine() ?? null,
      image: settings.gitImage,
      path: hostPath(settings),
      limits: settings.repositoryLimits,
    }),
    backends: Object.fromEntries(Object.entries(backends).map(([name, b]) => [name, options.wrapBackend ? options.wrapBackend(b) : b])),
    isolation: sandbox?.isolation,
    dockerImage: sandbox ? (image) => sandbox.forImage(image) : undefined,
    setup: sandbox
      ? {
          docker: (image) => (image === undefined ? sandbox : sandbox.forImage(image)).backend,
          proxyImage: settings.proxyImage,
          upstreamNetwork: settings.egressNetwork,
          hostsFile: settings.egressHostsFile,
          upstreamCaFile: settings.egressUpstreamCa,
          openCidrs: settings.egressOpenCidrs,
          connectPorts: settings.egressConnectPorts,
        }
      : undefined,
  };
}

/**
 * The host's two Temporal workers: one on the shared queue (workflows, and a run's first
 * activity), one on the host's own queue (every later activity of the runs it holds); either
 * one ending stops the other, so the host stops as one.
 */
async function temporalWorkers(
  options: WorkerOptions,
  settings: Settings,
  activities: Activities,
  hostQueue: string,
): Promise<HostWorkers> {
  const dataConverter = { payloadCodecs: [new PayloadSizeGuard()] };
  const telemetry = workerTelemetry(options.tracing ?? null);
  const version: WorkerDeploymentVersion = { deploymentName: settings.deploymentName, buildId: buildId() };
  const namespace = options.namespace ?? 'default';
  const common = {
    connection: options.connection,
    namespace,
    activities,
    dataConverter,
    interceptors: { activity: telemetry.activity },
    identity: workerIdentity(),
    // Every workflow this worker starts stays on this build: PINNED (docs/versioning.md).
    workerDeploymentOptions: deploymentOptions(version),
    // A worker that is stopped (replaced, or told to end) gives in-flight activities time to finish.
    shutdownGraceTime: '10 seconds',
  } as const;
  const shared =
    options.sharedQueue === false
      ? null
      : await Worker.create({
          ...common,
          taskQueue: options.taskQueue,
          workflowBundle: await workflowBundle(options.tracing ? 'traced' : 'plain'),
          sinks: telemetry.sinks,
          maxCachedWorkflows: options.maxCachedWorkflows ?? settings.maxCachedWorkflows,
        });
  const own = await Worker.create({ ...common, taskQueue: hostQueue });
  const workers = shared ? [shared, own] : [own];
  const polled = { workflow: shared ? [options.taskQueue] : [], activity: [...(shared ? [options.taskQueue] : []), hostQueue] };
  // Only once the workers poll does the server know the version's queues.
  const stopping = new AbortController();
  const current = () => becomeCurrent(options.connection, namespace, version, polled, common.identity, stopping.signal);
  const worker: HostWorkers = {
    async run() {
      const stopBoth = () => worker.shutdown();
      // Settles once both workers have stopped: the connection they hold may close only then.
      const ended = await Promise.allSettled([
        ...workers.map((w) => w.run().finally(stopBoth)),
        current().catch((err: unknown) => {
          stopBoth();
          throw err;
        }),
      ]);
      const failed = ended.find((e) => e.status === 'rejected');
      if (failed) throw failed.reason;
    },
    runUntil: (fn) => {
      const afterCurrent = () => current().then(fn);
      return shared ? shared.runUntil(() => own.runUntil(afterCurrent)) : own.runUntil(afterCurrent);
    },
    shutdown() {
      stopping.abort();
      for (const w of workers) if (w.getState() === 'RUNNING') w.shutdown();
    },
    version,
  };
  return worker;
}

/**
 * This host's identity: made once and kept in its state folder, so a restarted worker is the same
 * host. The file appears whole or not at all (a synced temporary file linked into place), so a
 * crash never leaves it empty and a concurrent reader never sees it half-written; the link fails
 * when another worker of this host made it first, and then that worker's id is this host's.
 */
export function hostId(stateDir: string): string {
  const file = join(stateDir, 'host-id');
  if (!existsSync(file)) {
    try {
      writeFileAtomic(file, `host-${randomBytes(6).toString('hex')}\n`, { exclusive: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
  }
  const id = readFileSync(file, 'utf8').trim();
  // Only an earlier version could leave a file without an id (it created the file, then wrote it).
  if (!/^\S{1,200}$/.test(id))
    throw new Error(
      `${file} holds no host id; if no run is waiting on this host, remove it and start the worker again, else write the id its runs name in their task queue (<queue>@host-...)`,
    );
  return id;
}
