/**
 * What every group of activities shares: the dependencies the worker wires (ledger, store,
 * backends, the setup's engine), the worker's configuration, and the few helpers more than one
 * group needs (a stored call, a run's backend and tool context, the operator's files read as
 * non-retryable failures when they are unusable).
 */
import { join, resolve } from 'node:path';
import { Context } from '@temporalio/activity';
import type { RunRef, Written } from '../core/activities';
import type { Budgets, IsolationEvidence, PendingAction, RunSpec } from '../core/contracts';
import { nonRetryable } from '../core/failures';
import type { Limits, RepositoryLimits } from '../core/limits';
import type { OpenRunner } from '../workspace/repository';
import type { RepositoryRead } from '../sandbox/git-sandbox';
import type { ValidCall } from '../core/tools';
import type { CallView } from '../core/transcript';
import { CredentialsFileError, lookupCredentials } from '../host/credentials';
import { ProvidersFileError, resolveEndpoint } from '../host/endpoints';
import type { Ledger } from '../store/ledger';
import type { Store } from '../store/store';
import { runPaths, type RunPaths } from '../workspace/workspace';
import { offThread } from '../workspace/thread';
import type { DockerBackend } from '../sandbox/backends/docker';
import type { ProxySettings } from '../sandbox/setup';
import { BackendUnavailableError, type ExecBackend } from '../sandbox/backends/types';
import type { ToolContext } from '../tools/context';

export interface HarnessConfig {
  /** Project state folder: run workspaces, control folders and the ledger live below it. */
  stateDir: string;
  limits: Limits;
  /** What a repository may make this worker read (AGENT_REPOSITORY_LIMITS). */
  repositoryLimits: RepositoryLimits;
  /** The images a repository's settings may name (AGENT_ALLOWED_IMAGES). */
  allowedImages: string[];
  /** The largest budgets any run on this worker gets (the settings' `AGENT_MAX_BUDGETS`). */
  maxBudgets: Partial<Budgets>;
  /** Model prices in US dollars per million tokens (the settings' prices file); a model not listed costs null. */
  prices?: Record<string, { input: number; output: number; cached_input?: number; cache_write_input?: number }>;
  /** The operator's providers file (`AGENT_PROVIDERS_FILE`, default `<state>/providers.json`). */
  providersFile: string;
  /** The operator's setup credentials (`AGENT_CREDENTIALS_FILE`, default `<state>/credentials.json`). */
  credentialsFile: string;
  /** The prompt versions a live source may use (`AGENT_PROMPTS_DIR`, default the build's `prompts/`). */
  promptsDir: string;
  /** Timeout of one provider HTTP request (default 120 s). */
  modelTimeoutMs?: number;
  /**
   * How long a step that finds no space left (a workspace, the ledger, the host store) is retried
   * before its run ends `disk_full` (the settings' `AGENT_DISK_FULL_WAIT_S`); default 0: at once.
   */
  diskFullWaitMs?: number;
  /**
   * This host's own task queue. A run's workspace, control folder, ledger rows and stored
   * transcript live on the host that loaded it, so every later activity of the run goes here.
   */
  hostQueue?: string;
  /** This worker exports traces (OTEL_EXPORTER_OTLP_ENDPOINT is set): a run it loads records its trace id. */
  traces?: boolean;
  /** Where an endpoint of each kind without its own `base_url` sends requests (the worker's settings). */
  baseUrls: Record<'openai' | 'anthropic', string>;
  /**
   * The value of the worker's variable `name` (an endpoint's `api_key_env`, a setup credential's
   * `env`), read at each call (host/settings.ts readCredential); undefined when it is not set.
   */
  credential: (name: string) => string | undefined;
}

export interface ActivityDeps {
  config: HarnessConfig;
  ledger: Ledger;
  store: Store;
  backends: Partial<Record<'local' | 'docker', ExecBackend>>;
  /** Where git reads a repository: the machine's own for one trusted on the local backend, else a container. */
  repositories: (read: RepositoryRead) => OpenRunner;
  /** The docker backend's isolation evidence (measured once per worker, then reused). */
  isolation?: () => Promise<IsolationEvidence>;
  /** The docker backend and its evidence for another image than the worker's (a run's --image, a repository's settings). */
  dockerImage?: (image: string) => { backend: ExecBackend; isolation: () => Promise<IsolationEvidence> };
  /** What a setup phase needs (SPEC section 11); absent: a run with a setup ends `infrastructure_error`. */
  setup?: SetupDeps;
}

export interface SetupDeps extends ProxySettings {
  /** The docker backend of `image` (the worker's own when undefined), unwrapped. */
  docker: (image?: string) => DockerBackend;
}

/** A backend the engine or runtime lacks is the host's failure, the same on every attempt. */
export function infrastructure(err: unknown): never {
  if (err instanceof BackendUnavailableError) throw nonRetryable('InfrastructureError', err.message, [err.detail]);
  throw err;
}

/** The helpers of every group, over one worker's dependencies. */
export class Kit {
  readonly config: HarnessConfig;
  readonly ledger: Ledger;
  readonly store: Store;

  constructor(readonly deps: ActivityDeps) {
    ({ config: this.config, ledger: this.ledger, store: this.store } = deps);
  }

  /** The call the workflow names by digest, checked to be the one it says. */
  storedCall<N extends ValidCall['name']>(call: CallView, name: N): Extract<ValidCall, { name: N }> {
    const full = this.store.get<ValidCall>(call.ref);
    if (full.name !== name || full.call_id !== call.call_id) {
      throw nonRetryable('ProtocolError', `stored call ${call.ref} is not the ${name} call ${call.call_id}`);
    }
    return full as Extract<ValidCall, { name: N }>;
  }

  /**
   * The operator's definitions of the credentials `egress` names, from the file as it is now
   * (loadRun checks them; the setup looks again, since the operator may have changed it); a
   * credentials file that cannot be read stops the run.
   */
  readonly credentialsFor = (egress: RunSpec['egress']) => {
    try {
      return lookupCredentials(this.config.credentialsFile, egress);
    } catch (err) {
      if (err instanceof CredentialsFileError) throw nonRetryable('InfrastructureError', err.message);
      throw err;
    }
  };

  /** The operator's endpoint; a providers file that cannot be read stops the run (it would fail alike on every attempt). */
  lookupEndpoint(name: string, model: string) {
    try {
      return resolveEndpoint(this.config.providersFile, name, model);
    } catch (err) {
      if (err instanceof ProvidersFileError) throw nonRetryable('InfrastructureError', err.message);
      throw err;
    }
  }

  paths(runId: string): RunPaths {
    return runPaths(this.config.stateDir, runId);
  }

  backendFor(name: RunRef['backend'], image?: string): ExecBackend {
    if (name === 'docker' && image !== undefined && this.deps.dockerImage) return this.deps.dockerImage(image).backend;
    const backend = this.deps.backends[name];
    if (!backend) {
      throw nonRetryable('InfrastructureError', `backend ${name} is not configured on this worker`, ['runtime_unavailable']);
    }
    return backend;
  }

  /** A tool handler's context: the step's, with the ledger its writes go through. */
  toolContext(ref: RunRef, timeoutMs: number): ToolContext {
    return { ...this.stepContext(ref, timeoutMs), ledger: this.ledger };
  }

  /** A step's context without the ledger, for the steps that never write (the verifier, the base run). */
  stepContext(ref: RunRef, timeoutMs: number): Omit<ToolContext, 'ledger'> {
    const ctx = Context.current();
    const paths = this.paths(ref.run_id);
    return {
      runId: ref.run_id,
      paths,
      fixture: ref.fixture,
      acceptanceDir: acceptanceDirOf(ref, paths),
      baseCommit: ref.repository?.base_commit ?? null,
      limits: this.config.limits,
      backend: this.backendFor(ref.backend, ref.image),
      timeoutMs,
      signal: ctx.cancellationSignal,
      heartbeat: () => ctx.heartbeat(),
    };
  }

  /**
   * The action as history carries it: a diff cut for display names its whole text, kept in the
   * host store (`diff_ref`), so the console can show it whole before anyone approves it there.
   */
  keepWholeDiff(prepared: { action: PendingAction; whole_diff: string | null }): PendingAction {
    return prepared.whole_diff === null ? prepared.action : { ...prepared.action, diff_ref: this.store.put('diff', prepared.whole_diff) };
  }

  /**
   * A write's or merge's outcome as the run gets it: whether the ledger holds its receipt, and once
   * it is in the workspace, the workspace's digest (the trace records it: a fork checks against it).
   */
  async written<O extends { kind: string }>(ref: RunRef, action: PendingAction, outcome: O): Promise<O & Written> {
    const workspace = this.paths(ref.run_id).workspace;
    const done = outcome.kind === 'written' || outcome.kind === 'receipt_recovered' || outcome.kind === 'already_recorded';
    return {
      ...outcome,
      receipted: this.ledger.receipt(action.action_id) !== null,
      ...(done ? { workspace_digest: await offThread('digest', [workspace], { key: workspace }) } : {}),
    };
  }

  /** Whether this worker is on the host of the run whose host queue is `hostQueue`. */
  onThisHost(hostQueue: string | null): boolean {
    return hostQueue === (this.config.hostQueue ?? null);
  }

  /** What a local activity answers on a worker that is not on the run's host. */
  elsewhere() {
    return { kind: 'elsewhere', host_queue: this.config.hostQueue ?? null } as const;
  }
}

/** Where a run's acceptance files are on the host, or null when it has none. */
function acceptanceDirOf(ref: RunRef, paths: RunPaths): string | null {
  if (ref.fixture.acceptance === null) return null;
  if (!ref.repository) return ref.fixture_dir === '' ? null : join(resolve(ref.fixture_dir), 'acceptance');
  if (ref.repository.acceptance_host_dir !== null) return resolve(ref.repository.acceptance_host_dir);
  return join(paths.control, 'acceptance'); // written there from the base tree by prepareWorkspace
}
