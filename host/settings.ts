/**
 * Configuration, read once from the environment: every variable the worker and the command line
 * read is a row of `VARIABLES`, with its typed field in `Settings`, its default and one line of
 * meaning. The table of variables in docs/configuration.md is checked against this table (tests/settings.test.ts),
 * so the two cannot drift. Nothing else in the harness reads `process.env` for a setting; it
 * takes `Settings` (or one of its fields) from its entry point.
 *
 * Two kinds of variable have no fixed name and so no row: the key variable each endpoint of the
 * operator's providers file names (`api_key_env`), read inside the `decide` activity at each call;
 * and the variable each credential of the operator's credentials file names (`env`), read by the
 * setup activity when it starts the run's egress proxy for a run that names that credential.
 * Both go through `readCredential`; a run only ever names an endpoint or a credential.
 */
import { isIP } from 'node:net';
import { isAbsolute, join, relative, resolve } from 'node:path';
import { DEFAULT_MAX_BUDGETS } from '../core/budgets';
import { budgetsSchema, type Budgets } from '../core/contracts';
import { DEFAULT_LIMITS, DEFAULT_REPOSITORY_LIMITS, type RepositoryLimits } from '../core/limits';
import { formatIssues } from '../core/validate';

export const PROJECT_ROOT = resolve(__dirname, '..', '..');
export const DEFAULT_TASK_QUEUE = 'coding-agent';
/** The Worker Deployment every worker polls as a version of (docs/versioning.md). */
export const DEFAULT_DEPLOYMENT_NAME = 'coding-agent';
/** How often a worker whose version is no longer current asks whether it has drained: 60 s. */
export const DEFAULT_DRAIN_CHECK_S = 60;
/** The prompt versions the build ships: `prompts/` copied into `dist/prompts` (scripts/copy-assets.js). */
export const BUILD_PROMPTS_DIR = resolve(__dirname, '..', 'prompts');
export const DEFAULT_SANDBOX_IMAGE = 'coding-agent-sandbox:1';
export const DEFAULT_PROXY_IMAGE = 'coding-agent-proxy:2';
export const DEFAULT_GIT_IMAGE = 'coding-agent-git:1';
/** The images a setup phase commits (sandbox/setup/cache.ts): a repository may start from one. */
export const SETUP_IMAGES = 'coding-agent-setup:*';
export const DEFAULT_EGRESS_NETWORK = 'bridge';
export const DEFAULT_MAX_CACHED_WORKFLOWS = 100;
/** How long a step that finds no space left waits for space before its run ends `disk_full`: 10 minutes. */
export const DEFAULT_DISK_FULL_WAIT_S = 600;
/** Where each provider's SDK sends requests when neither the endpoint nor the environment says otherwise. */
export const PUBLIC_BASE_URLS = { openai: 'https://api.openai.com/v1', anthropic: 'https://api.anthropic.com' } as const;

/**
 * Fault points of the crash tests: where a worker started with `AGENT_FAULT=<point>` kills itself
 * (host/faults.ts). Listed here so the variable is typed like every other.
 */
export const FAULT_POINTS = [
  /** writePatch: the approval is recorded, nothing of the write has happened (no intent yet). */
  'before_write',
  /** writePatch: intent recorded, temporary file written and synced, not yet renamed. */
  'after_temp_write',
  /** writePatch: the target holds the new content, the receipt is missing. */
  'after_rename',
  /** writePatch: receipt recorded, the activity has not completed. */
  'after_receipt',
  /** verify: the model said final, nothing of the verification has happened. */
  'in_verifier',
  /** Local backend: a candidate-test process group has just been spawned and recorded. */
  'during_tests',
  /** decide (live provider): the provider answered and the response is stored; the activity has not completed. */
  'after_model_response',
  /** loadRun of a task's child run: the child has started, its parent may not have recorded it yet. */
  'child_started',
  /** A task's child run stores its last trace events: its outcome is reached, not yet handed to its parent. */
  'child_finishing',
  /**
   * A read-only step or a replay's decision ran as a local activity and handed back its result:
   * the kill comes after it (`AGENT_FAULT_DELAY_MS` later), while the result is on its way into
   * the workflow task, which may or may not be completed by then.
   */
  'after_local_activity',
  /** A worker's start: it polls, and is about to wait for the server to list its version's queues and make it current. */
  'before_current',
] as const;

export type FaultPoint = (typeof FAULT_POINTS)[number];

export interface Settings {
  /**
   * How to reach Temporal, as the `temporal` CLI reads it (resolved with the config file by
   * host/connection.ts): no address here nor in the profile means the embedded dev server.
   */
  temporalAddress: string | null;
  /** Null: the profile's namespace, else `default` (a connection's namespace is its target's). */
  namespace: string | null;
  temporalProfile: string | null;
  /** The config file: TEMPORAL_CONFIG_FILE (`explicit`), else the CLI's default location; null when there is none. */
  temporalConfigFile: { path: string; explicit: boolean } | null;
  /** A secret: sent only as the connection's `authorization` header, never printed. */
  temporalApiKey: string | null;
  /** TEMPORAL_TLS and TEMPORAL_TLS_* as given (CA, client certificate and key, server name). */
  temporalTls: Record<string, string>;
  /** TEMPORAL_GRPC_META_* as given (an empty one removes a header the profile sets). */
  temporalGrpcMeta: Record<string, string>;
  taskQueue: string;
  /** The Worker Deployment this worker is a version of; its build id is the build's digest (host/build.ts). */
  deploymentName: string;
  /** Seconds between a superseded worker's questions whether its version has drained (then it exits). */
  drainCheckS: number;
  stateDir: string;
  /** The operator's model endpoints (default `<state>/providers.json`). */
  providersFile: string;
  /** The operator's setup credentials, which runs name (default `<state>/credentials.json`). */
  credentialsFile: string;
  /** The prompt versions of live sources (`v1/`, `v2/`...; default the build's `prompts/`). */
  promptsDir: string;
  /** Ports of the embedded dev server and its Web UI. */
  devServerPort: number;
  devUiPort: number;
  /** Folders whose replays the operator trusts without --trust-replay (the project's own fixtures). */
  trustedReplayDirs: string[];
  /** The Web UI to link runs to on a cluster (the embedded default links to its own). */
  webUiUrl: string | null;
  /** The `temporal` CLI as the operator names it; null: looked up (host/temporal-bin.ts). */
  temporalBin: string | null;
  /** The project's virtual environment with the Temporal CLI and pytest. */
  toolsDir: string;
  /** The search path of the harness's own processes (the local backend's get the tools environment first). */
  path: string;
  /** Model prices (US dollars per million tokens by model); null: none, so costs are null. */
  pricesFile: string | null;
  /** Workflows one worker keeps in its cache. */
  maxCachedWorkflows: number;
  /** The largest a run's workspace may grow (core/limits.ts `workspaceBytes`). */
  workspaceBytes: number;
  /** How long a step that finds its disk full is retried before the run ends `disk_full`. */
  diskFullWaitS: number;
  /** Image tag or content id of the docker backend's sandbox. */
  sandboxImage: string;
  /** The image in which a repository the user has not trusted is read (git; docker/build-git-image.sh). */
  gitImage: string;
  /**
   * The images a repository's settings may name (`image`): exact references, or `name:*` for
   * every tag of a name. A run's `--image` is the user's own choice and is not checked.
   */
  allowedImages: string[];
  /** The operator's bounds on what a repository makes the harness read and keep (core/limits.ts). */
  repositoryLimits: RepositoryLimits;
  /** The engine the docker backend talks to, as the operator names it; null: the local socket. */
  dockerHost: string | null;
  /** Image tag or content id of the setup phase's egress proxy (squid). */
  proxyImage: string;
  /** The engine network through which the egress proxy reaches upstream hosts. */
  egressNetwork: string;
  /** A hosts file the egress proxy resolves names from, and from nothing else; null: DNS as the engine gives it. */
  egressHostsFile: string | null;
  /** PEM certificates an intercepting egress proxy trusts for upstream HTTPS besides the system's; null: the system's only. */
  egressUpstreamCa: string | null;
  /** Ranges the egress proxy may reach although they are private or this machine's (CIDRs; a private registry). */
  egressOpenCidrs: string[];
  /** Ports a setup may CONNECT to besides 443. */
  egressConnectPorts: number[];
  /** Where an endpoint of each kind without its own `base_url` sends requests. */
  openaiBaseUrl: string;
  anthropicBaseUrl: string;
  /** Base URL of an OTLP/HTTP receiver for traces; null: no traces are exported (no exporter at all). */
  otlpEndpoint: string | null;
  /** Headers sent with each export request (an API key, say). */
  otlpHeaders: Record<string, string>;
  /** Where the worker serves Prometheus metrics (`host:port`); null: no metrics endpoint. */
  metricsAddress: string | null;
  /** Crash tests only: the point at which this worker kills itself with SIGKILL. */
  fault: FaultPoint | null;
  /** Server-fault tests only: 0 kills at the fault point; more holds this worker there that many ms instead. */
  faultHoldMs: number;
  faultCount: number;
  faultDelayMs: number;
  /** Set by the command line on the background worker it starts (host/background-worker.ts). */
  backgroundWorker: boolean;
  /**
   * This worker runs the test and acceptance commands of runs on the `local` backend (as host processes
   * with its own rights). A run's input cannot grant it: only the worker's operator.
   */
  allowLocal: boolean;
  /** The largest budgets any run on this worker gets, whoever asked (core/budgets.ts capBudgets). */
  maxBudgets: Partial<Budgets>;
}

type Env = Readonly<Record<string, string | undefined>>;

/** One environment variable: its name, the default and meaning docs/configuration.md shows, and how it is read. */
export interface Variable<T> {
  name: string;
  /** As docs/configuration.md's table shows it. */
  default: string;
  /** One line, as docs/configuration.md's table shows it. */
  meaning: string;
  /** The value given (undefined when unset) to the typed field; throws an actionable error for a bad one. */
  read: (value: string | undefined, env: Env) => T;
}

const given = (value: string | undefined): string | null => (value === undefined || value === '' ? null : value);

function integer(name: string, min: number, max: number, fallback: number): (value: string | undefined) => number {
  return (value) => {
    if (given(value) === null) return fallback;
    const n = Number(value);
    if (!Number.isInteger(n) || n < min || n > max)
      throw new Error(`${name} must be an integer from ${min} to ${max}, not ${JSON.stringify(value)}`);
    return n;
  };
}

/** A variable's JSON, or an error naming the variable and what it should hold. */
function jsonValue(name: string, what: string, text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new Error(`${name} must be a JSON object of ${what}: ${(err as Error).message}`);
  }
}

/** The entries of a comma-separated value, trimmed. */
const list = (value: string | undefined): string[] =>
  (value ?? '')
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean);

/** An IPv4 or IPv6 CIDR (one address is its /32 or /128), as squid and iptables read it: bits past the prefix do not count. */
function cidr(name: string, text: string): string {
  const [address, prefix, ...rest] = text.split('/');
  const family = isIP(address);
  const max = family === 6 ? 128 : 32;
  if (family === 0 || rest.length > 0 || (prefix !== undefined && (!/^\d{1,3}$/.test(prefix) || Number(prefix) > max)))
    throw new Error(`${name} must be CIDRs such as 10.20.0.0/16 or fd12::/64, separated by commas, not ${JSON.stringify(text)}`);
  return `${address}/${prefix ?? max}`;
}

/** The variables of a family (`TEMPORAL_TLS_*`...), by name; `keepEmpty` keeps those set to "". */
function family(env: Env, member: (name: string) => boolean, keepEmpty: boolean): Record<string, string> {
  return Object.fromEntries(
    Object.entries(env)
      .filter((e): e is [string, string] => member(e[0]) && e[1] !== undefined && (keepEmpty || e[1] !== ''))
      .sort(([a], [b]) => (a < b ? -1 : 1)),
  );
}

/** The command line marks the background worker it starts with this variable set to `1` (`backgroundWorker`). */
const BACKGROUND_WORKER_VARIABLE = 'AGENT_BACKGROUND_WORKER';

const stateDirOf = (env: Env): string => resolve(given(env.AGENT_STATE_DIR) ?? resolve(PROJECT_ROOT, '.agent-state'));

/** The table: one row per variable, every field of `Settings` with exactly one. */
export const VARIABLES: { readonly [K in keyof Settings]: Variable<Settings[K]> } = {
  temporalAddress: {
    name: 'TEMPORAL_ADDRESS',
    default: 'unset',
    meaning: "cluster to use, over the profile's address; no address here nor in the profile: the embedded dev server",
    read: given,
  },
  namespace: {
    name: 'TEMPORAL_NAMESPACE',
    default: '`default`',
    meaning: "namespace, over the profile's",
    read: given,
  },
  temporalProfile: {
    name: 'TEMPORAL_PROFILE',
    default: '`default`',
    meaning: 'profile of the config file, as the `temporal` CLI reads it (a profile named but missing is an error)',
    read: given,
  },
  temporalConfigFile: {
    name: 'TEMPORAL_CONFIG_FILE',
    default: '`~/.config/temporalio/temporal.toml`',
    meaning:
      "the `temporal` CLI's config file of profiles (`$XDG_CONFIG_HOME/temporalio/temporal.toml` when that is set); named but missing is an error",
    read: (v, env) => {
      const explicit = given(v);
      if (explicit !== null) return { path: resolve(explicit), explicit: true };
      const xdg = given(env.XDG_CONFIG_HOME);
      const dir = xdg !== null && isAbsolute(xdg) ? xdg : given(env.HOME) !== null ? join(env.HOME!, '.config') : null;
      return dir === null ? null : { path: join(dir, 'temporalio', 'temporal.toml'), explicit: false };
    },
  },
  temporalApiKey: {
    name: 'TEMPORAL_API_KEY',
    default: 'unset',
    meaning: "API key, over the profile's: sent as `authorization: Bearer`, turns TLS on; never printed or logged",
    read: given,
  },
  temporalTls: {
    name: 'TEMPORAL_TLS',
    default: 'unset',
    meaning:
      "TLS on or off, and with `TEMPORAL_TLS_*` over the profile's: `_CLIENT_CERT_PATH`/`_DATA`, `_CLIENT_KEY_PATH`/`_DATA`, `_SERVER_CA_CERT_PATH`/`_DATA`, `_SERVER_NAME`",
    // An empty value is unset, as for the other variables.
    read: (_v, env) => family(env, (name) => name === 'TEMPORAL_TLS' || name.startsWith('TEMPORAL_TLS_'), false),
  },
  temporalGrpcMeta: {
    name: 'TEMPORAL_GRPC_META_*',
    default: 'unset',
    meaning: "gRPC headers on every request (`TEMPORAL_GRPC_META_X_TEAM=a` sends `x-team: a`; empty: removes the profile's)",
    read: (_v, env) => family(env, (name) => name.startsWith('TEMPORAL_GRPC_META_'), true),
  },
  taskQueue: {
    name: 'AGENT_TASK_QUEUE',
    default: `\`${DEFAULT_TASK_QUEUE}\``,
    meaning: 'task queue of `agentRun` and its activities',
    read: (v) => given(v) ?? DEFAULT_TASK_QUEUE,
  },
  deploymentName: {
    name: 'AGENT_DEPLOYMENT_NAME',
    default: `\`${DEFAULT_DEPLOYMENT_NAME}\``,
    meaning:
      "the Worker Deployment every worker polls as a version of, its build id the build's digest; a run stays on the version that started it ([versioning](versioning.md))",
    read: (v) => {
      const name = given(v) ?? DEFAULT_DEPLOYMENT_NAME;
      // The server joins deployment name and build id with a dot in a version's name.
      if (!/^[A-Za-z0-9_-]{1,200}$/.test(name))
        throw new Error(`AGENT_DEPLOYMENT_NAME must be letters, digits, '-' or '_' (at most 200), not ${JSON.stringify(name)}`);
      return name;
    },
  },
  drainCheckS: {
    name: 'AGENT_DRAIN_CHECK_S',
    default: String(DEFAULT_DRAIN_CHECK_S),
    meaning:
      'seconds between the checks of a worker whose version is no longer current: it exits once the deployment reports its version drained (no open run pinned to it)',
    read: integer('AGENT_DRAIN_CHECK_S', 1, 24 * 3600, DEFAULT_DRAIN_CHECK_S),
  },
  stateDir: {
    name: 'AGENT_STATE_DIR',
    default: '`.agent-state`',
    meaning: 'run workspaces, control folders, ledger, host store, dev server database and logs',
    read: (_v, env) => stateDirOf(env),
  },
  providersFile: {
    name: 'AGENT_PROVIDERS_FILE',
    default: '`<state>/providers.json`',
    meaning: "the worker operator's model endpoints ([live models](live-models.md))",
    read: (v, env) => resolve(given(v) ?? join(stateDirOf(env), 'providers.json')),
  },
  credentialsFile: {
    name: 'AGENT_CREDENTIALS_FILE',
    default: '`<state>/credentials.json`',
    meaning:
      "the worker operator's setup credentials: each `{name, env, header, hosts, plain_http?}`; a run names one, the proxy sets its header ([container backend](container-backend.md))",
    read: (v, env) => resolve(given(v) ?? join(stateDirOf(env), 'credentials.json')),
  },
  promptsDir: {
    name: 'AGENT_PROMPTS_DIR',
    default: "the build's `prompts/`",
    meaning:
      'prompt versions of live sources (`v1/system.md`, `v1/tools.json`, ...; the newest is the default; [live models](live-models.md))',
    read: (v) => resolve(given(v) ?? BUILD_PROMPTS_DIR),
  },
  devServerPort: {
    name: 'AGENT_DEV_SERVER_PORT',
    default: '7233',
    meaning: 'port of the embedded dev server',
    read: integer('AGENT_DEV_SERVER_PORT', 1, 65535, 7233),
  },
  devUiPort: {
    name: 'AGENT_DEV_UI_PORT',
    default: '8233',
    meaning: "port of the embedded dev server's Web UI",
    read: integer('AGENT_DEV_UI_PORT', 1, 65535, 8233),
  },
  trustedReplayDirs: {
    name: 'AGENT_TRUSTED_REPLAY_DIRS',
    default: '`fixtures`',
    meaning: '`:`-separated folders whose replays the operator trusts (set but empty: none)',
    // Set but empty means "trust none", so only an unset variable takes the default.
    read: (v) =>
      (v ?? resolve(PROJECT_ROOT, 'fixtures'))
        .split(':')
        .filter(Boolean)
        .map((d) => resolve(d)),
  },
  webUiUrl: {
    name: 'AGENT_WEB_UI_URL',
    default: 'unset',
    meaning: 'the Web UI that the console and `report.html` link runs to on a cluster (the embedded default links to its own)',
    read: given,
  },
  temporalBin: {
    name: 'TEMPORAL_BIN',
    default: 'found',
    meaning: 'path of the `temporal` CLI (otherwise the tools environment, `PATH`, in that order; no process is started to find it)',
    read: given,
  },
  toolsDir: {
    name: 'AGENT_TOOLS_DIR',
    default: '`.agent-state/tools`',
    meaning: "the project's virtual environment with the Temporal CLI and pytest (fixed per checkout, not per state folder)",
    read: (v) => resolve(given(v) ?? join(PROJECT_ROOT, '.agent-state', 'tools')),
  },
  path: {
    name: 'PATH',
    default: '`/usr/local/bin:/usr/bin:/bin`',
    meaning: "where the `temporal` CLI is looked up; the local backend's test processes get the tools environment's `bin` first, then this",
    read: (v) => given(v) ?? '/usr/local/bin:/usr/bin:/bin',
  },
  pricesFile: {
    name: 'AGENT_PRICES_FILE',
    default: 'unset',
    meaning: 'model prices for `usage.cost_usd` ([live models](live-models.md)); unset: costs are null',
    read: given,
  },
  maxCachedWorkflows: {
    name: 'AGENT_MAX_CACHED_WORKFLOWS',
    default: String(DEFAULT_MAX_CACHED_WORKFLOWS),
    meaning: 'workflows a worker keeps in its cache; a parked run beyond it is evicted and replayed when its Signal comes',
    read: integer('AGENT_MAX_CACHED_WORKFLOWS', 0, 1_000_000, DEFAULT_MAX_CACHED_WORKFLOWS),
  },
  workspaceBytes: {
    name: 'AGENT_WORKSPACE_BYTES',
    default: String(DEFAULT_LIMITS.workspaceBytes),
    meaning:
      "the largest a run's workspace may grow, in bytes of its files: a write over it is refused (`too_large`), a test or acceptance process that writes past it is stopped and undone",
    read: integer('AGENT_WORKSPACE_BYTES', 1, Number.MAX_SAFE_INTEGER, DEFAULT_LIMITS.workspaceBytes),
  },
  diskFullWaitS: {
    name: 'AGENT_DISK_FULL_WAIT_S',
    default: String(DEFAULT_DISK_FULL_WAIT_S),
    meaning:
      'seconds a step that finds no space left (a workspace, the ledger, the host store) is retried before its run ends `failed` / `disk_full` naming the owner; 0: at once ([failures](failures.md))',
    read: integer('AGENT_DISK_FULL_WAIT_S', 0, 7 * 24 * 3600, DEFAULT_DISK_FULL_WAIT_S),
  },
  sandboxImage: {
    name: 'AGENT_SANDBOX_IMAGE',
    default: `\`${DEFAULT_SANDBOX_IMAGE}\``,
    meaning: "the docker backend's sandbox image (tag or content id)",
    read: (v) => given(v) ?? DEFAULT_SANDBOX_IMAGE,
  },
  gitImage: {
    name: 'AGENT_GIT_IMAGE',
    default: `\`${DEFAULT_GIT_IMAGE}\``,
    meaning:
      'the image in which a repository the user has not trusted on the local backend is read and its branch and patch are built (git, no network; `docker/build-git-image.sh`)',
    read: (v) => given(v) ?? DEFAULT_GIT_IMAGE,
  },
  allowedImages: {
    name: 'AGENT_ALLOWED_IMAGES',
    default: `the sandbox image and \`${SETUP_IMAGES}\``,
    meaning:
      "images a repository's settings may name, separated by commas (`name:tag`, a content id, or `name:*` for every tag); any other is refused before a container is made. `--image` is the user's and is not checked",
    read: (v, env) => {
      const entries = list(v);
      for (const e of entries)
        if (!/^[A-Za-z0-9][A-Za-z0-9._/:@-]*(:\*)?$/.test(e))
          throw new Error(
            `AGENT_ALLOWED_IMAGES must be image references separated by commas (name:tag, sha256:..., name:*), not ${JSON.stringify(e)}`,
          );
      return entries.length > 0 ? entries : [given(env.AGENT_SANDBOX_IMAGE) ?? DEFAULT_SANDBOX_IMAGE, SETUP_IMAGES];
    },
  },
  repositoryLimits: {
    name: 'AGENT_REPOSITORY_LIMITS',
    default: `\`${JSON.stringify(DEFAULT_REPOSITORY_LIMITS)}\``,
    meaning:
      "what a repository may make the harness read, as JSON (fields given replace the default's): `files`, `bytes`, `blob_bytes`, `path_bytes`, `depth` of its base tree, refused `too_large` naming the field while the listing streams; `new_files` a test or setup process may leave (stopped past it); `idle_s` a git command may print nothing, `read_s` one reading may last",
    read: (v) => {
      const text = given(v);
      if (text === null) return { ...DEFAULT_REPOSITORY_LIMITS };
      const raw = jsonValue('AGENT_REPOSITORY_LIMITS', 'limits, e.g. {"files": 200000}', text);
      if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw new Error('AGENT_REPOSITORY_LIMITS must be a JSON object');
      const out: RepositoryLimits = { ...DEFAULT_REPOSITORY_LIMITS };
      for (const [key, value] of Object.entries(raw)) {
        if (!(key in DEFAULT_REPOSITORY_LIMITS))
          throw new Error(
            `AGENT_REPOSITORY_LIMITS: unknown field ${JSON.stringify(key)} (known: ${Object.keys(DEFAULT_REPOSITORY_LIMITS).join(', ')})`,
          );
        if (!Number.isSafeInteger(value) || (value as number) < 1)
          throw new Error(`AGENT_REPOSITORY_LIMITS.${key} must be a positive integer, not ${JSON.stringify(value)}`);
        out[key as keyof RepositoryLimits] = value as number;
      }
      return out;
    },
  },
  dockerHost: {
    name: 'DOCKER_HOST',
    default: 'unset',
    meaning:
      'the Docker engine of the docker backend, unset: the local socket (dockerode also reads it, with `DOCKER_TLS_VERIFY` and `DOCKER_CERT_PATH`)',
    read: given,
  },
  proxyImage: {
    name: 'AGENT_PROXY_IMAGE',
    default: `\`${DEFAULT_PROXY_IMAGE}\``,
    meaning: "the setup phase's egress proxy image (squid; `docker/build-proxy-image.sh`)",
    read: (v) => given(v) ?? DEFAULT_PROXY_IMAGE,
  },
  egressNetwork: {
    name: 'AGENT_EGRESS_NETWORK',
    default: `\`${DEFAULT_EGRESS_NETWORK}\``,
    meaning: 'the engine network through which the egress proxy reaches upstream hosts',
    read: (v) => given(v) ?? DEFAULT_EGRESS_NETWORK,
  },
  egressHostsFile: {
    name: 'AGENT_EGRESS_HOSTS',
    default: 'unset',
    meaning:
      'a hosts file (`address name...` lines): the egress proxy resolves names from it and from nothing else; unset: DNS as the engine gives it',
    read: (v) => (given(v) === null ? null : resolve(v!)),
  },
  egressUpstreamCa: {
    name: 'AGENT_EGRESS_UPSTREAM_CA',
    default: 'unset',
    meaning: "PEM certificates an intercepting egress proxy (`egress.tls: intercept`) trusts for upstream HTTPS besides the system's",
    read: (v) => (given(v) === null ? null : resolve(v!)),
  },
  egressOpenCidrs: {
    name: 'AGENT_EGRESS_OPEN_CIDRS',
    default: 'unset',
    meaning:
      "comma-separated CIDRs (`10.20.0.0/16`, `fd12::/64`, or one address) the egress proxy may reach although they are private, loopback, link-local or this machine's (a private registry); unset: none",
    read: (v) => list(v).map((c) => cidr('AGENT_EGRESS_OPEN_CIDRS', c)),
  },
  egressConnectPorts: {
    name: 'AGENT_EGRESS_CONNECT_PORTS',
    default: 'unset',
    meaning: 'comma-separated ports a setup may `CONNECT` to through the egress proxy besides 443; unset: 443 only',
    read: (v) =>
      list(v).map((p) => {
        const n = Number(p);
        if (!/^\d{1,5}$/.test(p) || n < 1 || n > 65535)
          throw new Error(`AGENT_EGRESS_CONNECT_PORTS must be ports (1 to 65535) separated by commas, not ${JSON.stringify(p)}`);
        return n;
      }),
  },
  openaiBaseUrl: {
    name: 'OPENAI_BASE_URL',
    default: '`https://api.openai.com/v1`',
    meaning: 'where an `openai` endpoint without `base_url` sends its requests',
    read: (v) => given(v) ?? PUBLIC_BASE_URLS.openai,
  },
  anthropicBaseUrl: {
    name: 'ANTHROPIC_BASE_URL',
    default: '`https://api.anthropic.com`',
    meaning: 'where an `anthropic` endpoint without `base_url` sends its requests',
    read: (v) => given(v) ?? PUBLIC_BASE_URLS.anthropic,
  },
  otlpEndpoint: {
    name: 'OTEL_EXPORTER_OTLP_ENDPOINT',
    default: 'unset',
    meaning:
      'base URL of an OTLP/HTTP receiver: the worker and the command line export traces to `<url>/v1/traces` (JSON); unset: no exporter, nothing sent (docs/observability.md)',
    read: (v) => {
      const url = given(v);
      if (url === null) return null;
      let parsed: URL;
      try {
        parsed = new URL(url);
      } catch {
        throw new Error(`OTEL_EXPORTER_OTLP_ENDPOINT must be an http:// or https:// URL, not ${JSON.stringify(url)}`);
      }
      if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:')
        throw new Error(`OTEL_EXPORTER_OTLP_ENDPOINT must be an http:// or https:// URL, not ${JSON.stringify(url)}`);
      return url.replace(/\/+$/, '');
    },
  },
  otlpHeaders: {
    name: 'OTEL_EXPORTER_OTLP_HEADERS',
    default: 'unset',
    meaning: "headers of each trace export request, `name=value,...` (values percent-encoded), e.g. a receiver's API key",
    read: (v) => {
      const text = given(v);
      if (text === null) return {};
      const headers: Record<string, string> = {};
      for (const part of text
        .split(',')
        .map((p) => p.trim())
        .filter(Boolean)) {
        const at = part.indexOf('=');
        const name = at > 0 ? part.slice(0, at).trim() : '';
        // The value is never quoted in an error: it may be a key.
        if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(name))
          throw new Error('OTEL_EXPORTER_OTLP_HEADERS must be name=value pairs separated by commas');
        try {
          headers[name.toLowerCase()] = decodeURIComponent(part.slice(at + 1).trim());
        } catch {
          throw new Error(`OTEL_EXPORTER_OTLP_HEADERS: the value of ${name} is not valid percent-encoding`);
        }
      }
      return headers;
    },
  },
  metricsAddress: {
    name: 'AGENT_METRICS_ADDRESS',
    default: 'unset',
    meaning:
      'where the worker serves Prometheus metrics at `/metrics`: `PORT` (on 127.0.0.1) or `IP:PORT`; unset: no endpoint (docs/observability.md)',
    read: (v) => {
      const value = given(v);
      if (value === null) return null;
      const port = (p: string) => /^\d{1,5}$/.test(p) && Number(p) >= 1 && Number(p) <= 65535;
      if (port(value)) return `127.0.0.1:${value}`;
      // The SDK binds a socket address: an IP literal, not a name.
      const m = /^(\d{1,3}(?:\.\d{1,3}){3}|\[[0-9A-Fa-f:.]+\]):(\d+)$/.exec(value);
      if (m === null || !port(m[2]))
        throw new Error(
          `AGENT_METRICS_ADDRESS must be PORT or IP:PORT (e.g. 9464, 127.0.0.1:9464 or [::1]:9464), not ${JSON.stringify(value)}`,
        );
      return value;
    },
  },
  fault: {
    name: 'AGENT_FAULT',
    default: 'unset',
    meaning: 'crash tests only: the fault point at which the worker kills itself with SIGKILL (`host/faults.ts`)',
    read: (v) => {
      const point = given(v);
      if (point === null) return null;
      if (!(FAULT_POINTS as readonly string[]).includes(point))
        throw new Error(`AGENT_FAULT must be one of ${FAULT_POINTS.join(', ')}, not ${JSON.stringify(point)}`);
      return point as FaultPoint;
    },
  },
  faultHoldMs: {
    name: 'AGENT_FAULT_HOLD_MS',
    default: '0',
    meaning:
      'server-fault tests only: with `AGENT_FAULT`, the worker holds still at the fault point for this many ms (saying so on stderr) instead of killing itself, while the test kills the server',
    read: integer('AGENT_FAULT_HOLD_MS', 0, 60_000, 0),
  },
  faultCount: {
    name: 'AGENT_FAULT_COUNT',
    default: '1',
    meaning: 'crash tests only: with `AGENT_FAULT`, the worker kills itself the N-th time it reaches the fault point',
    read: integer('AGENT_FAULT_COUNT', 1, 1_000_000, 1),
  },
  faultDelayMs: {
    name: 'AGENT_FAULT_DELAY_MS',
    default: '0',
    meaning:
      'crash tests only: with `AGENT_FAULT=after_local_activity`, how many ms after the local activity handed back its result the worker kills itself',
    read: integer('AGENT_FAULT_DELAY_MS', 0, 60_000, 0),
  },
  backgroundWorker: {
    name: BACKGROUND_WORKER_VARIABLE,
    default: 'unset',
    meaning: 'set to `1` by the command line on the background worker it starts; not for people to set',
    read: (v) => v === '1',
  },
  allowLocal: {
    name: 'AGENT_ALLOW_LOCAL',
    default: 'unset',
    meaning:
      "`1`: this worker runs the test and acceptance commands of runs on the `local` backend, as host processes with its rights; `0`: it refuses every local run (`failed` / `local_not_allowed`); unset: `1` for the embedded default's background worker (its user's own), `0` for any other worker",
    read: (v, env) => {
      const value = given(v);
      if (value === null) return env[BACKGROUND_WORKER_VARIABLE] === '1';
      if (value !== '1' && value !== '0') throw new Error(`AGENT_ALLOW_LOCAL must be 1 or 0, not ${JSON.stringify(value)}`);
      return value === '1';
    },
  },
  maxBudgets: {
    name: 'AGENT_MAX_BUDGETS',
    default: `\`${JSON.stringify(DEFAULT_MAX_BUDGETS)}\``,
    meaning:
      "the largest budgets a run on this worker gets, as JSON (any budget field; those given replace the default's): a fixture's, a repository's or a run input's budget above its maximum, or without a limit where one is set, is capped (`budgets_capped` in the trace)",
    read: (v) => {
      const text = given(v);
      if (text === null) return { ...DEFAULT_MAX_BUDGETS };
      const raw = jsonValue('AGENT_MAX_BUDGETS', 'budgets, e.g. {"max_turns": 200}', text);
      const parsed = budgetsSchema.partial().safeParse(raw);
      if (!parsed.success) throw new Error(`AGENT_MAX_BUDGETS: ${formatIssues(parsed.error)}`);
      return { ...DEFAULT_MAX_BUDGETS, ...parsed.data };
    },
  },
};

/** Every setting, read from `env` (the process's environment by default). Throws on a malformed value. */
export function readSettings(env: Env = process.env): Settings {
  const out: Partial<Record<keyof Settings, unknown>> = {};
  for (const [field, variable] of Object.entries(VARIABLES) as [keyof Settings, Variable<unknown>][]) {
    out[field] = variable.read(env[variable.name], env);
  }
  return out as Settings;
}

/** One setting, for a module that needs only it. */
export function readSetting<K extends keyof Settings>(field: K, env: Env = process.env): Settings[K] {
  const variable = VARIABLES[field];
  return variable.read(env[variable.name], env);
}

/**
 * The value of a key variable an endpoint names (`api_key_env`), or of the variable a credential
 * of the credentials file names (`env`); undefined when unset or empty. Read at each use, never
 * kept: the caller must not return, log or store it.
 */
export function readCredential(name: string, env: Env = process.env): string | undefined {
  return given(env[name]) ?? undefined;
}

/** The table of variables of docs/configuration.md, as this module defines it. */
export function variablesTable(): string {
  const rows = Object.values(VARIABLES).map((v: Variable<unknown>) => `| \`${v.name}\` | ${v.default} | ${v.meaning} |`);
  return ['| variable | default | meaning |', '|---|---|---|', ...rows].join('\n');
}

/** A replay is trusted when the operator says so, or when it lies in a folder the operator trusts. */
export function replayTrusted(settings: Pick<Settings, 'trustedReplayDirs'>, replayPath: string, flag: boolean): boolean {
  if (flag) return true;
  return settings.trustedReplayDirs.some((dir) => {
    const rel = relative(dir, resolve(replayPath));
    return rel !== '' && !rel.startsWith('..') && !isAbsolute(rel);
  });
}
