/**
 * The activities of agentRun, built by a factory so the worker wires real dependencies (ledger,
 * backends, state folder) and tests can pass their own real ones.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { basename, resolve, join } from 'node:path';
import { Context } from '@temporalio/activity';
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import { z } from 'zod';
import {
  fixtureSchema,
  setupProblem,
  type Budgets,
  type Decision,
  type Fixture,
  type Replay,
  type IsolationEvidence,
  type ParsedRunInput,
  type PreparedAction,
  type RunSpec,
  type ToolResult,
  type VerifierFindings,
} from '../core/contracts';
import { capBudgets, effectiveBudgets, type CappedBudget } from '../core/budgets';
import { egressProblems } from '../core/egress';
import type { PromptRef, PromptTexts } from '../core/prompt';
import type { TraceEvent } from '../core/trace';
import {
  brief,
  resultView,
  type CallView,
  type DecisionView,
  type PendingEntry,
  type ResultView,
  type TranscriptEntry,
} from '../core/transcript';
import { isOrchestrationTool, READ_ONLY_TOOLS, type ValidCall } from '../core/tools';
import { taskFixture, withTaskIds, type DispatchCall } from '../core/tasks';
import { formatIssues, validateCall } from '../core/validate';
import { BackendUnavailableError, type ExecBackend } from '../sandbox/backends/types';
import type { DockerBackend } from '../sandbox/backends/docker';
import { egressPage, runSetup as setupPhase, type SetupResult } from '../sandbox/setup';
import type { EgressEvent } from '../sandbox/setup/squid';
import { buildId } from '../host/build';
import { CredentialsFileError, lookupCredentials } from '../host/credentials';
import { activeTraceId } from '../host/tracing';
import type { HarnessConfig } from './config';
import { digestJson } from '../host/digest';
import { nonRetryable } from '../core/failures';
import { loadReplay, replayNext, ReplayFileError, type DecideInput, type DecideResult, type SourceRef } from '../models/replay';
import type { Ledger } from '../host/ledger';
import { liveDecide } from '../models/live';
import { ProvidersFileError, resolveEndpoint } from '../host/endpoints';
import { loadPrompt, PromptError } from '../models/prompt';
import { StoreError, type Store } from '../host/store';
import { preparePatch as prepare, writePatch as write, type PrepareOutcome, type WriteOutcome } from '../tools/apply_patch';
import type { ToolContext } from '../tools/context';
import { readFile } from '../tools/read_file';
import type { TestRunData } from '../sandbox/test-runner';
import { runTests } from '../tools/run_tests';
import { search } from '../tools/search';
import { showDiff, workspaceDiff } from '../tools/show_diff';
import {
  prepareMerge as mergePrepare,
  writeMerge as mergeWrite,
  type MergeEntry,
  type MergeOutcome,
  type MergePrepared,
} from '../tools/merge_task';
import { faultPoint } from '../host/faults';
import { expectedFile, verify as runVerifier } from '../sandbox/verifier';
import { prepareWorkspace as prepareRunWorkspace, runPaths, type PreparedWorkspace, type RunPaths } from '../host/workspace/workspace';
// ---- repository runs (SPEC section 10) ----
import { loadRepository, prepareRepositoryWorkspace, type RepositoryFacts, type RepositoryRef } from '../host/repository';
// ----

export interface ActivityDeps {
  config: HarnessConfig;
  ledger: Ledger;
  store: Store;
  backends: Partial<Record<'local' | 'docker', ExecBackend>>;
  /** The docker backend's isolation evidence (measured once per worker, then reused). */
  isolation?: () => Promise<IsolationEvidence>;
  /** The docker backend and its evidence for another image than the worker's (a run's --image, a repository's settings). */
  dockerImage?: (image: string) => { backend: ExecBackend; isolation: () => Promise<IsolationEvidence> };
  /** What a setup phase needs (SPEC section 11); absent: a run with a setup ends `infrastructure_error`. */
  setup?: SetupDeps;
}

export interface SetupDeps {
  /** The docker backend of `image` (the worker's own when undefined), unwrapped. */
  docker: (image?: string) => DockerBackend;
  proxyImage: string;
  upstreamNetwork: string;
  hostsFile: string | null;
  upstreamCaFile: string | null;
  /** The operator's opened ranges (AGENT_EGRESS_OPEN_CIDRS) and extra CONNECT ports (AGENT_EGRESS_CONNECT_PORTS). */
  openCidrs: string[];
  connectPorts: number[];
}

/** What the workflow passes to every run-scoped activity. */
export interface RunRef {
  run_id: string;
  /** The run's rules: its fixture's, or a repository run's (from its settings). */
  fixture: RunSpec;
  /** Fixture folder as given in the run's input: absolute, or relative to the worker's working directory ('' for a repository run). */
  fixture_dir: string;
  backend: 'local' | 'docker';
  /** False for a task's child run: the hidden acceptance cases judge the orchestrating run only. */
  hidden_acceptance?: boolean;
  /** A repository run: its repository and base commit (not for a task's run, whose workspace is its parent's). */
  repository?: RepositoryRef;
  /** The docker backend's image, when it is not the worker's own. */
  image?: string;
  /** A repository run's project instructions (AGENTS.md, capped): their digest in the host store. */
  instructions?: string | null;
}

/** What a run works on, before its decision source is checked. */
interface Work {
  fixture: RunSpec;
  fixture_dir: string;
  /** A repository run: where its workspace comes from, and what its base said (for the trace). */
  repository?: { ref: RepositoryRef; facts: RepositoryFacts };
  /** A repository run's instructions: their digest in the host store. */
  instructions?: string | null;
  image?: string;
}

/** Where a run's acceptance files are on the host, or null when it has none. */
function acceptanceDirOf(ref: RunRef, paths: RunPaths): string | null {
  if (ref.fixture.acceptance === null) return null;
  if (!ref.repository) return ref.fixture_dir === '' ? null : join(resolve(ref.fixture_dir), 'acceptance');
  if (ref.repository.acceptance_host_dir !== null) return resolve(ref.repository.acceptance_host_dir);
  return join(paths.control, 'acceptance'); // written there from the base tree by prepareWorkspace
}

/** A fixture folder, checked: fixture.json, repo/, acceptance/ and a well-formed expected.json. */
function loadFixture(dir: string): { ok: true; fixture: Fixture } | { ok: false; reason: 'invalid_input'; detail: string } {
  const fixtureDir = resolve(dir);
  const fixtureFile = join(fixtureDir, 'fixture.json');
  if (!existsSync(fixtureFile)) return { ok: false, reason: 'invalid_input', detail: `no fixture.json in ${dir}` };
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(fixtureFile, 'utf8'));
  } catch (err) {
    return { ok: false, reason: 'invalid_input', detail: `fixture.json is not JSON: ${(err as Error).message}` };
  }
  const parsed = fixtureSchema.safeParse(raw);
  if (!parsed.success) {
    return { ok: false, reason: 'invalid_input', detail: `fixture.json: ${formatIssues(parsed.error)}` };
  }
  for (const part of ['repo', 'acceptance']) {
    if (!existsSync(join(fixtureDir, part)) || !statSync(join(fixtureDir, part)).isDirectory()) {
      return { ok: false, reason: 'invalid_input', detail: `fixture has no ${part}/ folder` };
    }
  }
  if (!existsSync(join(fixtureDir, 'acceptance', 'expected.json')))
    return { ok: false, reason: 'invalid_input', detail: 'fixture has no acceptance/expected.json' };
  const problem = setupProblem(parsed.data);
  if (problem !== null) return { ok: false, reason: 'invalid_input', detail: `fixture.json: ${problem}` };
  const reach = egressProblems(parsed.data.egress);
  if (reach.length > 0)
    return {
      ok: false,
      reason: 'invalid_input',
      detail: reach.map((p) => `fixture.json: egress.${p.path.join('.')}: ${p.message}`).join('; '),
    };
  // Checked here, before anything is created: a malformed expected.json would fail the verifier the same way every time.
  try {
    const expected = expectedFile.safeParse(JSON.parse(readFileSync(join(fixtureDir, 'acceptance', 'expected.json'), 'utf8')));
    if (!expected.success)
      return { ok: false, reason: 'invalid_input', detail: `acceptance/expected.json: ${formatIssues(expected.error)}` };
  } catch (err) {
    return { ok: false, reason: 'invalid_input', detail: `acceptance/expected.json is not JSON: ${(err as Error).message}` };
  }
  return { ok: true, fixture: parsed.data };
}

export type LoadRunResult =
  | {
      ok: true;
      fixture: RunSpec;
      fixture_dir: string;
      /** A repository run: its source and what its base said. */
      repository?: { ref: RepositoryRef; facts: RepositoryFacts };
      instructions?: string | null;
      /** The docker image of the run, when it is not the worker's own. */
      image?: string;
      replay: string | null;
      source: SourceRef;
      /** The loading host's own task queue. */
      host_queue: string | null;
      /** An orchestrating replay's task replays, by task title: digests in the host store. */
      child_replays: Record<string, string>;
      /** The build of the worker that loaded the run (host/build.ts). */
      build: string;
      /**
       * The run's trace id (32 hex digits), read from this activity's own span, when the loading
       * host exports traces; null otherwise (an id no receiver holds helps nobody). From history,
       * so every worker that replays the run reads the same id, whichever bundle it runs.
       */
      trace_id: string | null;
      /**
       * The run's budgets: its rules' overridden by its input, within the operator's maximums
       * (absent from histories recorded before the worker decided them: the workflow computed them).
       */
      budgets?: Budgets;
      /** The budgets the operator's maximums lowered. */
      capped?: CappedBudget[];
    }
  | { ok: false; reason: 'invalid_input' | 'replay_untrusted' | 'local_not_allowed' | 'repository_untrusted'; detail: string };

/** Parsed replays a worker keeps (most recently used). */
const REPLAYS_KEPT = 16;

/**
 * What a local activity answers when the worker running it is not on the run's host: the
 * workflow then calls the regular activity on the host's own queue.
 */
export interface Elsewhere {
  kind: 'elsewhere';
  /** The host queue of the worker that answered. */
  host_queue: string | null;
}

function infrastructure(err: unknown): never {
  if (err instanceof BackendUnavailableError) {
    throw nonRetryable('InfrastructureError', err.message, [err.detail]);
  }
  throw err;
}

export function createActivities(deps: ActivityDeps) {
  const { config, ledger, store } = deps;

  /** Stores the entries the workflow has not stored yet; results it made itself go in whole. */
  const appendTranscript = (transcript: { head: string | null; append: PendingEntry[] }): string | null =>
    store.appendTranscript(
      transcript.head,
      transcript.append.map((e): TranscriptEntry => {
        if ('message' in e) return e;
        const reply = e.reply ?? null;
        if (e.result === undefined) return { decision: e.decision, reply };
        return { decision: e.decision, reply, result: 'ref' in e.result ? e.result.ref : store.put('result', e.result.inline) };
      }),
    );

  /**
   * Replays by digest, parsed once: a stored replay never changes (its digest is its content), so
   * each decision does not parse the whole file again. A few are kept, whatever the number of runs.
   */
  const replays = new Map<string, Replay>();
  const storedReplay = (digest: string): Replay => {
    let replay = replays.get(digest);
    if (replay === undefined) {
      replay = store.get<Replay>(digest);
      if (replays.size >= REPLAYS_KEPT) replays.delete(replays.keys().next().value!);
    } else replays.delete(digest);
    replays.set(digest, replay);
    return replay;
  };

  const storedCall = <N extends ValidCall['name']>(call: CallView, name: N): Extract<ValidCall, { name: N }> => {
    const full = store.get<ValidCall>(call.ref);
    if (full.name !== name || full.call_id !== call.call_id) {
      throw nonRetryable('ProtocolError', `stored call ${call.ref} is not the ${name} call ${call.call_id}`);
    }
    return full as Extract<ValidCall, { name: N }>;
  };

  /** A decision as the workflow sees it: validated here, stored whole, carried by digest. */
  const decisionView = (
    decision: Exclude<Decision, { kind: 'model_error' }>,
    input: { run_id: string; turn: number; orchestrating?: boolean },
    reply: string | null,
  ): DecisionView => {
    const ref = store.put('decision', decision);
    switch (decision.kind) {
      case 'plan':
      case 'final':
        return { kind: decision.kind, text: brief(decision.text) as string, ref, reply };
      case 'tool': {
        const validation = validateCall(decision.call, `call-${input.turn}`, input.orchestrating ?? false);
        if (!validation.ok) return { kind: 'tool', ref, raw: brief(decision.call), call: null, invalid: validation.result, reply };
        const call = validation.call;
        const path = 'path' in call.arguments && typeof call.arguments.path === 'string' ? call.arguments.path : null;
        const view: CallView = {
          call_id: call.call_id,
          name: call.name,
          path,
          ref: store.put('call', call),
          identity: digestJson({ name: call.name, arguments: call.arguments }),
          turn: input.turn,
        };
        if (isOrchestrationTool(call.name)) {
          const { requirements: _r, known_facts: _k, suggestions: _s, ...args } = call.arguments as Record<string, unknown>;
          view.task = { action_id: digestJson({ run_id: input.run_id, name: call.name, arguments: call.arguments }), args };
        }
        return { kind: 'tool', ref, raw: brief(decision.call), call: view, invalid: null, reply };
      }
    }
  };

  /**
   * The operator's definitions of the credentials `egress` names, from the file as it is now
   * (loadRun checks them; the setup looks again, since the operator may have changed it); a
   * credentials file that cannot be read stops the run.
   */
  const credentialsFor = (egress: RunSpec['egress']) => {
    try {
      return lookupCredentials(config.credentialsFile, egress);
    } catch (err) {
      if (err instanceof CredentialsFileError) throw nonRetryable('InfrastructureError', err.message);
      throw err;
    }
  };

  /** The operator's endpoint; a providers file that cannot be read stops the run (it would fail alike on every attempt). */
  const lookupEndpoint = (name: string, model: string) => {
    try {
      return resolveEndpoint(config.providersFile, name, model);
    } catch (err) {
      if (err instanceof ProvidersFileError) throw nonRetryable('InfrastructureError', err.message);
      throw err;
    }
  };

  /**
   * The run's prompt version (named, or the newest), read once into the host store under its
   * digest. A version the worker lacks is the run's input at fault; unusable prompt files are the
   * operator's, and stop the run without a retry.
   */
  const readPrompt = (version: string | undefined): { ok: true; ref: PromptRef } | { ok: false; detail: string } => {
    try {
      const { ref, texts } = loadPrompt(config.promptsDir, version);
      store.put('prompt', texts);
      return { ok: true, ref };
    } catch (err) {
      if (err instanceof PromptError && err.kind === 'unknown_version') return { ok: false, detail: err.message };
      if (err instanceof PromptError) throw nonRetryable('InfrastructureError', err.message);
      throw err;
    }
  };

  const backendFor = (name: RunRef['backend'], image?: string): ExecBackend => {
    if (name === 'docker' && image !== undefined && deps.dockerImage) return deps.dockerImage(image).backend;
    const backend = deps.backends[name];
    if (!backend) {
      throw nonRetryable('InfrastructureError', `backend ${name} is not configured on this worker`, ['runtime_unavailable']);
    }
    return backend;
  };

  const toolContext = (ref: RunRef, timeoutMs: number): ToolContext => {
    const ctx = Context.current();
    const paths = runPaths(config.stateDir, ref.run_id);
    return {
      runId: ref.run_id,
      paths,
      fixture: ref.fixture,
      acceptanceDir: acceptanceDirOf(ref, paths),
      baseCommit: ref.repository?.base_commit ?? null,
      limits: config.limits,
      ledger,
      backend: backendFor(ref.backend, ref.image),
      timeoutMs,
      signal: ctx.cancellationSignal,
      heartbeat: () => ctx.heartbeat(),
    };
  };

  /**
   * The action as history carries it: a diff cut for display names its whole text, kept in the
   * host store (`diff_ref`), so the console can show it whole before anyone approves it there.
   */
  const keepWholeDiff = (prepared: { action: PreparedAction; whole_diff: string | null }): PreparedAction =>
    prepared.whole_diff === null ? prepared.action : { ...prepared.action, diff_ref: store.put('diff', prepared.whole_diff) };

  /**
   * Runs a stored call; its whole result is stored (one sync) and history gets its view, with
   * what a test run changed and was undone, whole (the workflow traces and counts it).
   */
  const toolResult = async (ref: RunRef, view: CallView, timeoutMs: number): Promise<ResultView> => {
    const ctx = toolContext(ref, timeoutMs);
    const result = await runTool(ctx, storedCall(view, view.name));
    const unreceipted = view.name === 'run_tests' ? (result.data as TestRunData | null)?.unreceipted : undefined;
    const resultRef = store.put('result', result);
    return unreceipted
      ? { ...resultView(result, resultRef), unreceipted: { step: 'run_tests', ...unreceipted } }
      : resultView(result, resultRef);
  };

  /** Whether this worker is on the host of the run whose host queue is `hostQueue`. */
  const onThisHost = (hostQueue: string | null): boolean => hostQueue === (config.hostQueue ?? null);
  const elsewhere = (): Elsewhere => ({ kind: 'elsewhere', host_queue: config.hostQueue ?? null });

  /** The next decision of a stored replay. One transaction: the transcript entries, the request and the decision cost one sync. */
  const replayDecide = (input: DecideInput & { source: Extract<SourceRef, { kind: 'replay' }> }): DecideResult =>
    store.batch((): DecideResult => {
      const head = appendTranscript(input.transcript);
      store.put('model_request', {
        run_id: input.run_id,
        source: input.source,
        cursor: input.cursor,
        turn: input.turn,
        tools_enabled: input.tools_enabled,
        transcript: head,
      });
      const next = replayNext(storedReplay(input.source.digest), input.cursor);
      if (next === undefined) return { kind: 'exhausted', head, usage: null };
      if (next.kind === 'model_error') {
        const ref = store.put('decision', next);
        return {
          kind: 'model_error',
          transient: next.transient,
          cut_off: false,
          retry_after_ms: null,
          detail: `the replay's model_error (${next.transient ? 'transient' : 'permanent'})`,
          ref,
          cursor: input.cursor + 1,
          head,
          usage: null,
        };
      }
      return {
        kind: 'decisions',
        decisions: [decisionView(input.tasks ? withTaskIds(next, input.tasks) : next, input, null)],
        cursor: input.cursor + 1,
        head,
        usage: null,
      };
    });

  /** The next decision of the run's source: a replay's next one, or a live model's reply. */
  const nextDecisions = async (input: DecideInput): Promise<DecideResult> => {
    if (input.source.kind === 'provider') {
      const head = appendTranscript(input.transcript);
      const ctx = Context.current();
      const source = input.source;
      // Looked up again at each call, by name: the URL and the key variable are the operator's alone.
      const found = lookupEndpoint(source.endpoint, source.model);
      if (!found.ok || found.endpoint.kind !== source.provider) {
        const detail = found.ok
          ? `endpoint ${source.endpoint} is now of kind ${found.endpoint.kind}, not ${source.provider}`
          : found.detail;
        throw nonRetryable('ProviderUnavailable', detail);
      }
      // The content loadRun stored; a run from before prompts were versioned takes the newest version.
      const prompt = source.prompt
        ? { ref: source.prompt, texts: store.get<PromptTexts>(source.prompt.digest) }
        : loadPrompt(config.promptsDir);
      const live = {
        store,
        prices: config.prices ?? {},
        timeoutMs: config.modelTimeoutMs ?? 120_000,
        signal: ctx.cancellationSignal,
        heartbeat: () => ctx.heartbeat(),
        credential: config.credential,
        baseUrls: config.baseUrls,
        endpoint: found.endpoint,
        prompt,
      };
      return liveDecide(live, { ...input, source }, head, (decisions, reply) => ({
        kind: 'decisions',
        decisions: decisions.map((d) => decisionView(d, input, reply)),
        cursor: input.cursor,
        head,
        usage: null,
      }));
    }
    return replayDecide({ ...input, source: input.source });
  };

  return withDeterministicFailures({
    /** Reads and checks the fixture and the decision source; nothing is created yet. */
    async loadRun(input: ParsedRunInput): Promise<LoadRunResult> {
      const source = input.source;
      // Whether this host runs commands as its own processes is its operator's decision (the worker
      // has no local backend otherwise); nothing in a run's input, `trusted` included, changes it.
      if (input.backend === 'local' && deps.backends.local === undefined) {
        return {
          ok: false,
          reason: 'local_not_allowed',
          detail:
            "this worker does not run commands on the local backend (its operator allows that with AGENT_ALLOW_LOCAL=1; a run's input cannot): run it in the sandbox, --backend docker",
        };
      }
      // A repository's tests and their configuration (a conftest.py, a package script) are anyone's
      // code: on the host, only when the user said they trust it.
      if (input.repo && input.backend === 'local' && input.repo.trusted !== true) {
        return {
          ok: false,
          reason: 'repository_untrusted',
          detail:
            "on the local backend a repository's tests run on the worker's host with its rights: the user must trust the repository (--trust-repository), or run it in the sandbox (--backend docker)",
        };
      }
      let work: Work;
      if (input.repo) {
        const loaded = loadRepository(input.repo, (instructions) => store.put('instructions', instructions));
        if (!loaded.ok) return { ok: false, reason: 'invalid_input', detail: loaded.detail };
        const image = input.image ?? loaded.image ?? undefined;
        work = {
          fixture: loaded.spec,
          fixture_dir: '',
          repository: { ref: loaded.ref, facts: loaded.facts },
          instructions: loaded.instructions,
          ...(image ? { image } : {}),
        };
      } else {
        const loaded = loadFixture(input.fixture!);
        if (!loaded.ok) return loaded;
        work = { fixture: loaded.fixture, fixture_dir: input.fixture!, ...(input.image ? { image: input.image } : {}) };
      }
      const child = input.child;
      if (child) faultPoint('child_started');
      // A task's run works on the parent's rules with the task's instruction and paths, in a copy of
      // the parent's workspace: a repository task keeps no change of its own to make a branch of.
      // Its setup ran in the parent's run: the workspace holds its products and the image is the parent's setup image.
      const fixture = child
        ? withoutSetup(taskFixture(work.fixture, store.get<DispatchCall>(child.dispatch_ref).arguments, child.paths))
        : work.fixture;
      if (child) delete work.repository;
      // A setup's only network is the egress proxy, and only the container backend has one to give.
      if (fixture.setup && input.backend !== 'docker') {
        return {
          ok: false,
          reason: 'invalid_input',
          detail:
            'this run has a setup phase (setup in its settings), which runs only on the docker backend: its network is an egress proxy that the local backend cannot give (--backend docker)',
        };
      }
      // The credentials it names, against the operator's file: refused here, before any workspace or container.
      const credentials = credentialsFor(fixture.egress);
      if (!credentials.ok) return { ok: false, reason: 'invalid_input', detail: credentials.detail };
      const hostQueue = config.hostQueue ?? null;
      const trace_id = config.traces === true ? activeTraceId() : null;
      const { budgets, capped } = capBudgets(effectiveBudgets(fixture.budgets, input.budgets), config.maxBudgets);
      if (source.kind !== 'replay') {
        const found = lookupEndpoint(source.endpoint, source.model);
        if (!found.ok) return { ok: false, reason: 'invalid_input', detail: found.detail };
        // Cost is known only from the operator's prices: an unpriced model could not keep the budget.
        if (budgets.max_cost_usd !== undefined && config.prices?.[source.model] === undefined)
          return {
            ok: false,
            reason: 'invalid_input',
            detail: `max_cost_usd needs the price of model ${source.model}, and the worker's prices file (AGENT_PRICES_FILE) has none: its cost could not be counted`,
          };
        const prompt = readPrompt(input.prompt);
        if (!prompt.ok) return { ok: false, reason: 'invalid_input', detail: prompt.detail };
        const ref: SourceRef = {
          kind: 'provider',
          endpoint: found.endpoint.name,
          provider: found.endpoint.kind,
          model: source.model,
          prompt: prompt.ref,
        };
        return {
          ok: true,
          ...work,
          fixture,
          replay: null,
          source: ref,
          host_queue: hostQueue,
          child_replays: {},
          build: buildId(),
          trace_id,
          budgets,
          capped,
        };
      }
      if (input.prompt !== undefined)
        return {
          ok: false,
          reason: 'invalid_input',
          detail: 'a prompt version goes with a live source (an endpoint and a model), not a replay',
        };
      // A replay can create test files that the test command then executes on the host.
      if (input.backend === 'local' && !source.trusted) {
        return {
          ok: false,
          reason: 'replay_untrusted',
          detail: 'the local backend runs only replays the operator trusts (--trust-replay)',
        };
      }
      let replay: Replay;
      let name: string;
      if (child) {
        // The parent read its replay once; a task without a replay of its own has no decision to take.
        replay = child.replay_digest ? store.get<Replay>(child.replay_digest) : { schema_version: 1, decisions: [] };
        name = child.title;
      } else {
        try {
          replay = loadReplay(source.path);
        } catch (err) {
          if (err instanceof ReplayFileError) return { ok: false, reason: 'invalid_input', detail: err.message };
          throw err;
        }
        name = basename(source.path).replace(/\.json$/, '');
      }
      // Read once: the run uses this content to its end, whatever happens to the file.
      const digest = store.put('replay', replay);
      const childReplays = Object.fromEntries(Object.entries(replay.children ?? {}).map(([title, r]) => [title, store.put('replay', r)]));
      return {
        ok: true,
        ...work,
        fixture,
        replay: name,
        source: { kind: 'replay', digest },
        host_queue: hostQueue,
        child_replays: childReplays,
        build: buildId(),
        trace_id,
        budgets,
        capped,
      };
    },

    /** The isolation evidence of the docker backend (for `image`, when the run has its own); never throws for a missing engine. */
    async checkIsolation(image?: string): Promise<IsolationEvidence> {
      if (image !== undefined && deps.dockerImage) return deps.dockerImage(image).isolation();
      if (!deps.backends.docker || !deps.isolation) {
        return { verified: false, checks: {}, image_id: null, settings: null, reason_detail: 'runtime_unavailable' };
      }
      return deps.isolation();
    },

    /** A fresh workspace from the fixture's repository, or (a task's run) from the parent run's workspace as it is now. */
    async prepareWorkspace(ref: {
      run_id: string;
      fixture_dir: string;
      from_run?: string;
      repository?: RepositoryRef;
    }): Promise<PreparedWorkspace> {
      if (ref.repository && !ref.from_run) return prepareRepositoryWorkspace(runPaths(config.stateDir, ref.run_id), ref.repository);
      const from = ref.from_run ? runPaths(config.stateDir, ref.from_run).workspace : join(resolve(ref.fixture_dir), 'repo');
      return prepareRunWorkspace(runPaths(config.stateDir, ref.run_id), from);
    },

    /**
     * The setup phase (SPEC section 11): the cached setup image, or the setup's commands behind the
     * egress proxy; then the setup's products in the workspace, which becomes the baseline.
     */
    async runSetup(ref: RunRef): Promise<SetupResult> {
      const spec = ref.fixture.setup;
      if (!spec) throw nonRetryable('ProtocolError', 'runSetup for a run without a setup');
      if (ref.backend !== 'docker' || !deps.setup)
        throw nonRetryable('InfrastructureError', 'a setup phase needs the docker backend, which this worker lacks', [
          'runtime_unavailable',
        ]);
      const ctx = Context.current();
      const result = await setupPhase(
        {
          backend: deps.setup.docker(ref.image),
          proxyImage: deps.setup.proxyImage,
          upstreamNetwork: deps.setup.upstreamNetwork,
          hostsFile: deps.setup.hostsFile,
          upstreamCaFile: deps.setup.upstreamCaFile,
          openCidrs: deps.setup.openCidrs,
          connectPorts: deps.setup.connectPorts,
          credentialsFor,
          credential: config.credential,
          limits: config.limits,
          signal: ctx.cancellationSignal,
          heartbeat: () => ctx.heartbeat(),
        },
        runPaths(config.stateDir, ref.run_id),
        spec,
        ref.fixture.egress ?? null,
      ).catch(infrastructure);
      if (ctx.cancellationSignal.aborted) throw new CancelledFailure('the setup was cancelled');
      return result;
    },

    /** The setup's egress events from `offset` on, a page at a time (a setup result carries the first page). */
    async setupEgress(ref: { run_id: string }, offset: number): Promise<EgressEvent[]> {
      return egressPage(runPaths(config.stateDir, ref.run_id), offset);
    },

    /** merge_task's first half: the task's change as one action over its paths, or why it cannot merge. */
    async prepareMerge(
      ref: RunRef,
      task: { task_id: string; run_id: string },
    ): Promise<Exclude<MergePrepared, { kind: 'prepared' }> | { kind: 'prepared'; action: PreparedAction; entries_ref: string }> {
      const prepared = mergePrepare(toolContext(ref, 0), config.stateDir, task);
      if (prepared.kind !== 'prepared') return prepared;
      return { kind: 'prepared', action: keepWholeDiff(prepared), entries_ref: store.put('merge', prepared.entries) };
    },

    /** merge_task's second half: the approved merge, exactly once; receipted like a write. */
    async writeMerge(ref: RunRef, action: PreparedAction, entriesRef: string): Promise<MergeOutcome & { receipted: boolean }> {
      const outcome = mergeWrite(toolContext(ref, 0), action, store.get<MergeEntry[]>(entriesRef));
      return { ...outcome, receipted: ledger.receipt(action.action_id) !== null };
    },

    /** The next decision, and the build of the worker that took it (the run records which builds served it). */
    async decide(input: DecideInput): Promise<DecideResult> {
      return { ...(await nextDecisions(input)), build: buildId() };
    },

    /**
     * `decide` of a replay as a local activity: run by the worker of the workflow task, with no
     * server round trip, when that worker is on the run's host; `elsewhere` otherwise.
     */
    async localDecide(hostQueue: string | null, input: DecideInput): Promise<DecideResult | Elsewhere> {
      if (input.source.kind !== 'replay') throw nonRetryable('ProtocolError', 'a live decision is never a local activity');
      if (!onThisHost(hostQueue)) return elsewhere();
      return { ...replayDecide({ ...input, source: input.source }), build: buildId() };
    },

    /** Stores trace events and transcript entries the workflow holds; returns the transcript's head. */
    async persist(input: {
      run_id: string;
      trace: TraceEvent[];
      transcript: { head: string | null; append: PendingEntry[] };
      task_finishing?: boolean;
    }): Promise<string | null> {
      if (input.task_finishing) faultPoint('child_finishing');
      return store.batch(() => {
        store.appendTrace(input.run_id, input.trace);
        return appendTranscript(input.transcript);
      });
    },

    /** The read-only tools: read_file, search, show_diff and run_tests. The full result stays in the store. */
    async executeTool(ref: RunRef, view: CallView, timeoutMs: number): Promise<ResultView> {
      return toolResult(ref, view, timeoutMs);
    },

    /** read_file, search or show_diff as a local activity, on the run's host only (see localDecide). */
    async localTool(hostQueue: string | null, ref: RunRef, view: CallView, timeoutMs: number): Promise<ResultView | Elsewhere> {
      if (!READ_ONLY_TOOLS.has(view.name)) throw nonRetryable('ProtocolError', `${view.name} is never a local activity`);
      if (!onThisHost(hostQueue)) return elsewhere();
      return toolResult(ref, view, timeoutMs);
    },

    async preparePatch(
      ref: RunRef,
      view: CallView,
    ): Promise<Exclude<PrepareOutcome, { kind: 'prepared' }> | { kind: 'prepared'; action: PreparedAction }> {
      const prepared = prepare(toolContext(ref, 0), view.call_id, storedCall(view, 'apply_patch').arguments);
      return prepared.kind === 'prepared' ? { kind: 'prepared', action: keepWholeDiff(prepared) } : prepared;
    },

    /** The write, and whether the ledger holds its receipt now: the run counts receipts from the ledger, not beside writes. */
    async writePatch(ref: RunRef, action: PreparedAction, view: CallView): Promise<WriteOutcome & { receipted: boolean }> {
      const outcome = write(toolContext(ref, 0), action, storedCall(view, 'apply_patch').arguments);
      return { ...outcome, receipted: ledger.receipt(action.action_id) !== null };
    },

    async verify(ref: RunRef, timeoutMs: number): Promise<VerifierFindings> {
      const ctx = toolContext(ref, timeoutMs);
      const findings = await runVerifier({
        ...ctx,
        paths: ctx.paths,
        onProgress: ctx.heartbeat,
        hiddenAcceptance: ref.hidden_acceptance !== false,
      }).catch(infrastructure);
      if (ctx.signal.aborted) throw new CancelledFailure('verification was cancelled');
      return findings;
    },

    /** Changed paths of a run that ended before verification (empty when no workspace exists). */
    async diffPaths(ref: { run_id: string }): Promise<string[]> {
      const paths = runPaths(config.stateDir, ref.run_id);
      if (!existsSync(join(paths.control, 'prepared.json'))) return [];
      return workspaceDiff(paths, 0, 0).paths;
    },
  });
}

/** A task's rules without the setup phase its parent ran. */
function withoutSetup<S extends RunSpec>(spec: S): S {
  const { setup: _setup, egress: _egress, ...rest } = spec;
  return rest as S;
}

async function runTool(ctx: ToolContext, call: ValidCall): Promise<ToolResult> {
  switch (call.name) {
    case 'read_file':
      return readFile(ctx, call.call_id, call.arguments);
    case 'search':
      return search(ctx, call.call_id, call.arguments);
    case 'show_diff':
      return showDiff(ctx, call.call_id);
    case 'run_tests': {
      const result = await runTests(ctx, call.call_id).catch(infrastructure);
      // A cancelled activity must say so, or the workflow would take the partial result.
      if (ctx.signal.aborted) throw new CancelledFailure('run_tests was cancelled');
      return result;
    }
    case 'apply_patch':
      throw nonRetryable('ProtocolError', 'apply_patch goes through preparePatch and writePatch');
    default:
      throw nonRetryable('ProtocolError', `${call.name} is carried out by the workflow, not as a tool activity`);
  }
}

/** errno codes that the same call would meet again: retrying cannot help. */
const DETERMINISTIC_ERRNO = new Set(['EACCES', 'EPERM', 'EROFS', 'EISDIR', 'ENOTDIR', 'ELOOP', 'ENAMETOOLONG']);

/**
 * Turns a failure that would repeat on every attempt into a non-retryable ApplicationFailure
 * with its own type (core/failures.ts), so the run ends at once with a reason instead of
 * retrying to its deadline. Errors are told apart by class or errno code, never by name.
 * Everything else (a lost engine, a busy database, a crash) stays retryable, within the
 * activity's bounded attempts.
 */
export function deterministicFailure(name: string, err: unknown): unknown {
  if (err instanceof ApplicationFailure || err instanceof CancelledFailure) return err;
  const e = err as NodeJS.ErrnoException;
  if (typeof e?.code === 'string' && DETERMINISTIC_ERRNO.has(e.code)) {
    return nonRetryable('InfrastructureError', `${name}: ${e.message}`, [e.code]);
  }
  if (err instanceof BackendUnavailableError) return nonRetryable('InfrastructureError', `${name}: ${err.message}`, [err.detail]);
  if (err instanceof ProvidersFileError) return nonRetryable('InfrastructureError', `${name}: ${err.message}`);
  if (err instanceof ReplayFileError) return nonRetryable('ReplayFileError', `${name}: ${err.message}`);
  if (err instanceof SyntaxError || err instanceof StoreError || err instanceof z.core.$ZodError) {
    return nonRetryable('DataError', `${name}: ${(err as Error).message}`);
  }
  return err;
}

function withDeterministicFailures<T extends Record<string, (...args: never[]) => Promise<unknown>>>(activities: T): T {
  return Object.fromEntries(
    Object.entries(activities).map(([name, fn]) => [
      name,
      async (...args: never[]) => {
        try {
          return await fn(...args);
        } catch (err) {
          throw deterministicFailure(name, err);
        }
      },
    ]),
  ) as T;
}

export type Activities = ReturnType<typeof createActivities>;
