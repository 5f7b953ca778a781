/**
 * Loading a run: the fixture or repository and the decision source checked before anything is
 * created (loadRun), the sandbox's isolation evidence, and the run's fresh workspace.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import type {
  LoadedFork,
  LoadRunResult,
  PreparedWorkspace,
  RepositoryFacts,
  RepositoryRef,
  SourceRef,
  WorkspaceSource,
} from '../core/activities';
import { capBudgets, effectiveBudgets, type CappedBudget } from '../core/budgets';
import {
  fixtureSchema,
  setupProblem,
  type Budgets,
  type Decision,
  type Fixture,
  type IsolationEvidence,
  type ParsedRunInput,
  type Replay,
  type RunSpec,
  type VerdictFile,
  type VerdictRef,
  verdictFileSchema,
} from '../core/contracts';
import { egressProblems } from '../core/egress';
import { nonRetryable } from '../core/failures';
import type { PromptRef } from '../core/prompt';
import { taskFixture, type DispatchCall } from '../core/tasks';
import { brief } from '../core/transcript';
import { formatIssues } from '../core/validate';
import { buildId } from '../host/build';
import { readRegular } from '../workspace/hostile-read';
import { faultPoint } from '../host/faults';
import { planFork } from '../workspace/fork-plan';
import type { ForkPlan } from '../workspace/fork';
import { loadRepository, prepareRepositoryWorkspace, type LoadedRepository } from '../workspace/repository';
import { GitError } from '../workspace/git';
import { offThread } from '../workspace/thread';
import { GitSandboxUnavailable, sandboxRefusal } from '../sandbox/git-sandbox';
import { imageAllowed, imageRefusal, repositoryRead } from '../core/repo-settings';
import { Context } from '@temporalio/activity';
import { activeTraceId } from '../host/tracing';
import { makingWorkspace } from '../workspace/workspace';
import { loadPrompt, PromptError } from '../models/prompt';
import { loadReplay, ReplayFileError } from '../models/replay';
import { expectedFile } from '../sandbox/verifier';
import type { Kit } from './kit';

type Refusal = Extract<LoadRunResult, { ok: false }>;

/** A task's verdict file is read up to this size (its test patch is capped below it). */
const VERDICT_FILE_MAX = 16 * 1024 * 1024;

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

/** What every loaded run carries besides its work and source. */
interface Loaded {
  host_queue: string | null;
  build: string;
  trace_id: string | null;
  budgets: Budgets;
  capped: CappedBudget[];
}

/**
 * The run's prompt version (named, or the newest), read once into the host store under its
 * digest. A version the worker lacks is the run's input at fault; unusable prompt files are the
 * operator's, and stop the run without a retry.
 */
function readPrompt(kit: Kit, version: string | undefined): { ok: true; ref: PromptRef } | { ok: false; detail: string } {
  try {
    const { ref, texts } = loadPrompt(kit.config.promptsDir, version);
    kit.store.put('prompt', texts);
    return { ok: true, ref };
  } catch (err) {
    if (err instanceof PromptError && err.kind === 'unknown_version') return { ok: false, detail: err.message };
    if (err instanceof PromptError) throw nonRetryable('InfrastructureError', err.message);
    throw err;
  }
}

/**
 * Whether this host may run the run's commands at all. Running commands as its own processes is
 * its operator's decision (the worker has no local backend otherwise), and a repository's tests
 * and their configuration (a conftest.py, a package script) are anyone's code: on the host only
 * when the user said they trust it. Nothing in a run's input, `trusted` included, changes the first.
 */
function gate(kit: Kit, input: ParsedRunInput): Refusal | null {
  if (input.backend === 'local' && kit.deps.backends.local === undefined)
    return {
      ok: false,
      reason: 'local_not_allowed',
      detail:
        "this worker does not run commands on the local backend (its operator allows that with AGENT_ALLOW_LOCAL=1; a run's input cannot): run it in the sandbox, --backend docker",
    };
  if (input.repo && input.backend === 'local' && input.repo.trusted !== true)
    return {
      ok: false,
      reason: 'repository_untrusted',
      detail:
        "on the local backend a repository's tests run on the worker's host with its rights: the user must trust the repository (--trust-repository), or run it in the sandbox (--backend docker)",
    };
  return null;
}

/**
 * A repository run's base, read where the user's trust says (workspace/repository.ts), and the image
 * its settings name checked against the operator's list before any container is made.
 */
async function repositoryWork(kit: Kit, input: ParsedRunInput, repo: NonNullable<ParsedRunInput['repo']>): Promise<Work | Refusal> {
  const read = repositoryRead(input.backend, repo.trusted);
  let loaded: LoadedRepository;
  try {
    loaded = await loadRepository(kit.deps.repositories(read), kit.config.repositoryLimits, repo, (instructions) =>
      kit.store.put('instructions', instructions),
    );
  } catch (err) {
    if (err instanceof GitSandboxUnavailable) return { ok: false, reason: 'invalid_input', detail: sandboxRefusal(err) };
    throw err;
  }
  if (!loaded.ok) return { ok: false, reason: 'invalid_input', detail: loaded.detail };
  // The user's --image is theirs to choose; a repository names only what the operator allows.
  if (input.image === undefined && loaded.image !== null && !imageAllowed(loaded.image, kit.config.allowedImages))
    return { ok: false, reason: 'invalid_input', detail: imageRefusal(loaded.image) };
  const image = input.image ?? loaded.image ?? undefined;
  return {
    fixture: loaded.spec,
    fixture_dir: '',
    repository: { ref: { ...loaded.ref, read }, facts: loaded.facts },
    instructions: loaded.instructions,
    ...(image ? { image } : {}),
  };
}

/** The fixture or repository a run works on; a task's run works on its parent's rules with the task's instruction and paths. */
async function work(kit: Kit, input: ParsedRunInput): Promise<Work | Refusal> {
  const { store } = kit;
  let found: Work;
  if (input.repo) {
    const loaded = await repositoryWork(kit, input, input.repo);
    if ('ok' in loaded) return loaded;
    found = loaded;
  } else {
    const loaded = loadFixture(input.fixture!);
    if (!loaded.ok) return loaded;
    const { verdict, ...fixture } = loaded.fixture;
    found = { fixture, fixture_dir: input.fixture!, ...(input.image ? { image: input.image } : {}) };
    if (verdict) found.fixture = { ...fixture, verdict_ref: keepVerdict(kit, { ...verdict, schema_version: 1 }) };
  }
  if (input.repo?.verdict_file !== undefined) {
    const file = readVerdictFile(input.repo.verdict_file);
    if ('ok' in file) return file;
    found.fixture = { ...found.fixture, verdict_ref: keepVerdict(kit, file) };
  }
  const child = input.child;
  if (!child) return found;
  faultPoint('child_started');
  // A task's run works in a copy of the parent's workspace: a repository task keeps no change of
  // its own to make a branch of. Its setup ran in the parent's run: the workspace holds its
  // products and the image is the parent's setup image.
  // A task's run is judged against its own start: the task's named tests judge the whole run.
  const { repository: _parentRepository, ...rest } = found;
  const { verdict_ref: _verdict, ...spec } = found.fixture;
  return {
    ...rest,
    fixture: withoutSetup(taskFixture(spec, store.get<DispatchCall>(child.dispatch_ref).arguments, child.paths)),
  };
}

/** A task's verdict file (a SWE-bench instance's part the model never sees), checked. */
function readVerdictFile(path: string): VerdictFile | Refusal {
  let raw: unknown;
  try {
    const text = readRegular(resolve(path), VERDICT_FILE_MAX, 'the verdict file').toString('utf8');
    raw = JSON.parse(text);
  } catch (err) {
    return { ok: false, reason: 'invalid_input', detail: `the task's verdict file ${basename(path)}: ${(err as Error).message}` };
  }
  const parsed = verdictFileSchema.safeParse(raw);
  if (!parsed.success)
    return { ok: false, reason: 'invalid_input', detail: `the task's verdict file ${basename(path)}: ${formatIssues(parsed.error)}` };
  return parsed.data;
}

/** The task's verdict kept in the host store; the run's rules carry its digests and counts. */
function keepVerdict(kit: Kit, v: VerdictFile): VerdictRef {
  const named = v.fail_to_pass !== undefined || v.pass_to_pass !== undefined;
  return {
    tests_ref: named ? kit.store.put('verdict', { fail_to_pass: v.fail_to_pass, pass_to_pass: v.pass_to_pass }) : null,
    fail_to_pass: v.fail_to_pass?.length ?? null,
    pass_to_pass: v.pass_to_pass?.length ?? null,
    test_patch: v.test_patch ? kit.store.put('verdict', v.test_patch) : null,
    tests_may_change: v.tests_may_change === true,
  };
}

/** The run's rules checked against the backend and the operator's credentials file. */
function checkRules(kit: Kit, input: ParsedRunInput, fixture: RunSpec): Refusal | null {
  // A setup's only network is the egress proxy, and only the container backend has one to give.
  if (fixture.setup && input.backend !== 'docker')
    return {
      ok: false,
      reason: 'invalid_input',
      detail:
        'this run has a setup phase (setup in its settings), which runs only on the docker backend: its network is an egress proxy that the local backend cannot give (--backend docker)',
    };
  // The credentials it names, against the operator's file: refused here, before any workspace or container.
  const credentials = kit.credentialsFor(fixture.egress);
  return credentials.ok ? null : { ok: false, reason: 'invalid_input', detail: credentials.detail };
}

/** A live source: the operator's endpoint, the model's price when the run has a cost budget, the prompt version. */
function liveSource(kit: Kit, input: ParsedRunInput & { source: { kind: 'provider' } }, budgets: Budgets): SourceRef | Refusal {
  const { source } = input;
  const found = kit.lookupEndpoint(source.endpoint, source.model);
  if (!found.ok) return { ok: false, reason: 'invalid_input', detail: found.detail };
  // Cost is known only from the operator's prices: an unpriced model could not keep the budget.
  if (budgets.max_cost_usd !== undefined && kit.config.prices?.[source.model] === undefined)
    return {
      ok: false,
      reason: 'invalid_input',
      detail: `max_cost_usd needs the price of model ${source.model}, and the worker's prices file (AGENT_PRICES_FILE) has none: its cost could not be counted`,
    };
  const prompt = readPrompt(kit, input.prompt);
  if (!prompt.ok) return { ok: false, reason: 'invalid_input', detail: prompt.detail };
  return { kind: 'provider', endpoint: found.endpoint.name, provider: found.endpoint.kind, model: source.model, prompt: prompt.ref };
}

/** A replay: trusted where it runs on the host, read once into the host store with its tasks' replays. */
function replaySource(
  kit: Kit,
  input: ParsedRunInput & { source: { kind: 'replay' } },
): { replay: string; digest: string; children: Record<string, string> } | Refusal {
  const { store } = kit;
  const { source, child } = input;
  if (input.prompt !== undefined)
    return {
      ok: false,
      reason: 'invalid_input',
      detail: 'a prompt version goes with a live source (an endpoint and a model), not a replay',
    };
  // A replay can create test files that the test command then executes on the host.
  if (input.backend === 'local' && !source.trusted)
    return { ok: false, reason: 'replay_untrusted', detail: 'the local backend runs only replays the operator trusts (--trust-replay)' };
  let replay: Replay;
  let name: string;
  if (child) {
    // The parent read its replay once; a task without a replay of its own has no decision to take.
    replay = child.replay_digest ? store.get<Replay>(child.replay_digest) : { schema_version: 1, decisions: [] };
    name = child.title;
  } else if (input.fork?.replay_digest !== undefined) {
    // A fork goes on with the forked run's replay as that run read it, whatever the file holds now.
    replay = store.get<Replay>(input.fork.replay_digest);
    name = basename(source.path).replace(/\.json$/, '');
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
  const children = Object.fromEntries(Object.entries(replay.children ?? {}).map(([title, r]) => [title, store.put('replay', r)]));
  return { replay: name, digest, children };
}

/**
 * A fork: what it restores, planned from what this host keeps of the forked run, its plan stored
 * for prepareWorkspace. Runs whose state is more than a workspace and a transcript (a setup's
 * image, tasks) are refused.
 */
function loadFork(kit: Kit, input: ParsedRunInput, found: Work): LoadedFork | Refusal {
  const fork = input.fork!;
  if (found.fixture.setup || input.subruns || found.fixture.subruns)
    return {
      ok: false,
      reason: 'invalid_input',
      detail: 'a run with a setup phase or with sub-runs cannot be forked: its state is more than a workspace and a transcript',
    };
  const finding = planFork({ store: kit.store, ledger: kit.ledger, stateDir: kit.config.stateDir }, fork);
  if (!finding.ok) return { ok: false, reason: 'fork_unavailable', detail: finding.detail };
  const { plan } = finding;
  const decisions = kit.store.transcript(plan.transcript).flatMap((e) => ('decision' in e ? [kit.store.get<Decision>(e.decision)] : []));
  const stated = decisions.filter((d) => d.kind === 'plan').at(-1);
  return {
    plan: kit.store.put('fork', plan),
    transcript: plan.transcript,
    cursor: plan.cursor,
    workspace_digest: plan.workspace_digest,
    writes: plan.writes.length,
    stated_plan: stated ? (brief(stated.text) as string) : null,
  };
}

/** Reads and checks the fixture and the decision source; nothing is created yet. */
async function loadRun(kit: Kit, input: ParsedRunInput): Promise<LoadRunResult> {
  const { config } = kit;
  const refused = gate(kit, input);
  if (refused) return refused;
  const found = await work(kit, input);
  if ('ok' in found) return found;
  const rulesRefused = checkRules(kit, input, found.fixture);
  if (rulesRefused) return rulesRefused;
  const fork = input.fork ? loadFork(kit, input, found) : null;
  if (fork !== null && 'ok' in fork) return fork;
  // A fork's task, when the user gave one, instead of the forked run's.
  if (input.fork?.task !== undefined) found.fixture = { ...found.fixture, task: input.fork.task };
  const loaded: Loaded = {
    host_queue: config.hostQueue ?? null,
    build: buildId(),
    trace_id: config.traces === true ? activeTraceId() : null,
    ...capBudgets(effectiveBudgets(found.fixture.budgets, input.budgets), config.maxBudgets),
  };
  if (input.source.kind === 'provider') {
    const source = liveSource(kit, { ...input, source: input.source }, loaded.budgets);
    if ('ok' in source) return source;
    return { ok: true, ...found, ...loaded, ...(fork ? { fork } : {}), replay: null, source, child_replays: {} };
  }
  const replay = replaySource(kit, { ...input, source: input.source });
  if ('ok' in replay) return replay;
  return {
    ok: true,
    ...found,
    ...loaded,
    ...(fork ? { fork } : {}),
    replay: replay.replay,
    source: { kind: 'replay', digest: replay.digest },
    child_replays: replay.children,
  };
}

export function loadActivities(kit: Kit) {
  const { deps } = kit;
  return {
    loadRun: (input: ParsedRunInput): Promise<LoadRunResult> => loadRun(kit, input),

    /** The isolation evidence of the docker backend (for `image`, when the run has its own); never throws for a missing engine. */
    async checkIsolation(image?: string): Promise<IsolationEvidence> {
      if (image !== undefined && deps.dockerImage) return deps.dockerImage(image).isolation();
      if (!deps.backends.docker || !deps.isolation) {
        return { verified: false, checks: {}, image_id: null, settings: null, reason_detail: 'runtime_unavailable' };
      }
      return deps.isolation();
    },

    /**
     * A fresh workspace from the fixture's repository, or (a task's run) from the parent run's
     * workspace as it is now, or (a fork) the forked run's as it was after the forked turn.
     */
    async prepareWorkspace(ref: WorkspaceSource): Promise<PreparedWorkspace> {
      const paths = kit.paths(ref.run_id);
      const call = { key: paths.workspace, onProgress: () => Context.current().heartbeat() };
      return makingWorkspace(paths, async () => {
        if (ref.fork) {
          const plan = kit.store.get<ForkPlan>(ref.fork);
          // The written contents, from the host store, go with the plan: the thread has no store.
          const contents: Record<string, Uint8Array> = {};
          for (const w of plan.writes) {
            const bytes = kit.store.content(w.after);
            if (bytes !== null) contents[w.after] = bytes;
          }
          return offThread('prepareFork', [paths, kit.paths(plan.from_run), plan, contents], call);
        }
        if (ref.repository && !ref.from_run) {
          const repository = ref.repository;
          return prepareRepositoryWorkspace(
            paths,
            repository,
            kit.deps.repositories(repository.read ?? 'sandbox'),
            kit.config.repositoryLimits,
            call.onProgress,
          ).catch((err: unknown) => {
            if (err instanceof GitSandboxUnavailable) throw nonRetryable('InfrastructureError', sandboxRefusal(err));
            if (err instanceof GitError) throw nonRetryable('InfrastructureError', `the repository cannot be read: ${err.message}`);
            throw err;
          });
        }
        const from = ref.from_run ? kit.paths(ref.from_run).workspace : join(resolve(ref.fixture_dir), 'repo');
        return offThread('prepareFixture', [paths, from], call);
      });
    },
  };
}

/** A task's rules without the setup phase its parent ran. */
function withoutSetup<S extends RunSpec>(spec: S): S {
  const { setup: _setup, egress: _egress, ...rest } = spec;
  return rest as S;
}

type FixtureRefusal = { ok: false; reason: 'invalid_input'; detail: string };
const refuse = (detail: string): FixtureRefusal => ({ ok: false, reason: 'invalid_input', detail });

/** A fixture folder, checked: fixture.json, repo/, acceptance/ and a well-formed expected.json. */
function loadFixture(dir: string): { ok: true; fixture: Fixture } | FixtureRefusal {
  const fixtureDir = resolve(dir);
  const fixtureFile = join(fixtureDir, 'fixture.json');
  if (!existsSync(fixtureFile)) return refuse(`no fixture.json in ${dir}`);
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(fixtureFile, 'utf8'));
  } catch (err) {
    return refuse(`fixture.json is not JSON: ${(err as Error).message}`);
  }
  const parsed = fixtureSchema.safeParse(raw);
  if (!parsed.success) return refuse(`fixture.json: ${formatIssues(parsed.error)}`);
  for (const part of ['repo', 'acceptance']) {
    if (!existsSync(join(fixtureDir, part)) || !statSync(join(fixtureDir, part)).isDirectory())
      return refuse(`fixture has no ${part}/ folder`);
  }
  if (!existsSync(join(fixtureDir, 'acceptance', 'expected.json'))) return refuse('fixture has no acceptance/expected.json');
  const problem = setupProblem(parsed.data);
  if (problem !== null) return refuse(`fixture.json: ${problem}`);
  const reach = egressProblems(parsed.data.egress);
  if (reach.length > 0) return refuse(reach.map((p) => `fixture.json: egress.${p.path.join('.')}: ${p.message}`).join('; '));
  // Checked here, before anything is created: a malformed expected.json would fail the verifier the same way every time.
  try {
    const expected = expectedFile.safeParse(JSON.parse(readFileSync(join(fixtureDir, 'acceptance', 'expected.json'), 'utf8')));
    if (!expected.success) return refuse(`acceptance/expected.json: ${formatIssues(expected.error)}`);
  } catch (err) {
    return refuse(`acceptance/expected.json is not JSON: ${(err as Error).message}`);
  }
  return { ok: true, fixture: parsed.data };
}
