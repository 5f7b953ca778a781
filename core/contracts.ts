/**
 * The data contracts of SPEC sections 2-8 as zod schemas. Everything here is pure and safe to
 * import from workflow code.
 */
import { z } from 'zod';
import { matching } from './patterns';
import type { ErrorCode } from './errors';
import { promptVersionSchema, type PromptRef } from './prompt';
import type { RunReason } from './reasons';

const digest = matching(/^[0-9a-f]{64}$/, 'a lowercase hex SHA-256 digest');
export const CALL_ID = /^[A-Za-z0-9_.:-]{1,64}$/;

// ---- tool calls and results (section 3) ----

/** The envelope of a proposed call. `arguments` is validated per tool afterwards. */
export const toolCallEnvelope = z.strictObject({
  call_id: z.string().regex(CALL_ID, 'call_id: 1-64 characters of [A-Za-z0-9_.:-]'),
  name: z.string(),
  arguments: z.record(z.string(), z.unknown()),
});

export interface ToolResult {
  call_id: string;
  ok: boolean;
  data: unknown;
  error: ErrorCode | null;
  truncated: boolean;
}

export function okResult(call_id: string, data: unknown, truncated = false): ToolResult {
  return { call_id, ok: true, data, error: null, truncated };
}

export function errorResult(call_id: string, error: ErrorCode, data: unknown = null, truncated = false): ToolResult {
  return { call_id, ok: false, data, error, truncated };
}

// ---- budgets and fixtures (section 2) ----

const DAY_S = 24 * 3600;

/**
 * A run's budgets. Every field has a maximum here, whoever sets it (a fixture, a repository, a
 * run's input, the operator); the worker's operator caps them further (`AGENT_MAX_BUDGETS`).
 */
export const budgetsSchema = z.strictObject({
  max_turns: z.int().min(1).max(100_000),
  max_tool_calls: z.int().min(0).max(100_000),
  deadline_s: z
    .number()
    .positive()
    .max(30 * DAY_S),
  call_timeout_s: z.number().positive().max(DAY_S),
  /** Live sources: tokens in and out over the whole run. */
  max_model_tokens: z.int().min(1).max(1_000_000_000).optional(),
  /** Live sources: the context of one request, tool definitions and reserved output included. */
  context_budget_tokens: z.int().min(1000).max(10_000_000).optional(),
  /** Live sources: the output limit of one reply. */
  max_output_tokens: z.int().min(16).max(1_000_000).optional(),
  /** How long one write waits for a person (default 7 days); the deadline does not run meanwhile. */
  approval_timeout_s: z
    .number()
    .positive()
    .max(365 * DAY_S)
    .optional(),
  /**
   * Live sources: US dollars over the whole run (an orchestrating run: over its whole tree), priced
   * from the worker's prices file; a model without a price cannot take this budget.
   */
  max_cost_usd: z.number().positive().max(100_000).optional(),
});
export type Budgets = z.infer<typeof budgetsSchema>;

const command = z.array(z.string().min(1)).min(1);

/** The name of an environment variable. */
export const ENV_NAME = /^[A-Z_][A-Z0-9_]*$/;

/** In a junit-format test command: the path where the runner must write its JUnit XML report. */
export const JUNIT_PLACEHOLDER = '{junit}';

/** How a run's candidate tests are run and counted (a fixture's `tests`, a repository's settings). */
export const testsSchema = z
  .strictObject({
    command,
    format: z.enum(['pytest', 'node-test', 'junit']),
    timeout_s: z.number().positive(),
  })
  .refine((t) => (t.format === 'junit') === t.command.some((a) => a.includes(JUNIT_PLACEHOLDER)), {
    message: `the junit format needs ${JUNIT_PLACEHOLDER} in the command (where the runner writes its JUnit XML report), and only that format may use it`,
    path: ['command'],
  });
export type TestsSpec = z.infer<typeof testsSchema>;

/** A test's outcome as its runner reported it (SPEC section 6). */
export const TEST_OUTCOMES = ['passed', 'failed', 'error', 'skipped', 'xfail'] as const;
export type TestOutcome = (typeof TEST_OUTCOMES)[number];
export type OutcomeCounts = Record<TestOutcome, number>;
/** The counts of a run with no test. */
export const noOutcomes = (): OutcomeCounts => ({ passed: 0, failed: 0, error: 0, skipped: 0, xfail: 0 });
/** One test of a run, named as its runner names it (sandbox/junit.ts). */
export interface TestCase {
  id: string;
  outcome: TestOutcome;
}
/** A test id is cut to this many characters. */
export const TEST_ID_MAX = 512;
/** Tests (or paths) a finding or a record names at most; the full lists are in the host store. */
export const NAMED_MAX = 50;

const testId = z.string().min(1).max(TEST_ID_MAX);

/**
 * A task's own verdict (SWE-bench's FAIL_TO_PASS and PASS_TO_PASS): when given, these ids decide
 * instead of the tests that passed at the base. `tests_may_change`: a test whose file an approved
 * write deleted or renamed is not counted lost.
 */
export const taskVerdictSchema = z.strictObject({
  fail_to_pass: z.array(testId).max(100_000).optional(),
  pass_to_pass: z.array(testId).max(100_000).optional(),
  tests_may_change: z.boolean().optional(),
});
export type TaskVerdict = z.infer<typeof taskVerdictSchema>;

/**
 * A task's verdict file (a SWE-bench instance's part the model never sees): the ids that decide and
 * the test patch applied to the tree only for verification and the base run.
 */
export const verdictFileSchema = taskVerdictSchema.extend({
  schema_version: z.literal(1),
  test_patch: z
    .string()
    .max(8 * 1024 * 1024)
    .nullable()
    .optional(),
});
export type VerdictFile = z.infer<typeof verdictFileSchema>;

/**
 * What a run's rules carry of its task's verdict: counts and digests in the host store, never the
 * lists or the patch (they would ride on every activity's input in history).
 */
export interface VerdictRef {
  /** The host store's digest of `{fail_to_pass, pass_to_pass}`, or null when the task names none. */
  tests_ref: string | null;
  fail_to_pass: number | null;
  pass_to_pass: number | null;
  /** The host store's digest of the test patch (a JSON string), or null. */
  test_patch: string | null;
  tests_may_change: boolean;
}

/** The hidden acceptance command (SPEC section 2's protocol). */
export const acceptanceSchema = z.strictObject({ command, timeout_s: z.number().positive() });
export type AcceptanceSpec = z.infer<typeof acceptanceSchema>;

/** `acceptance/expected.json`: the expected value of each acceptance case; never leaves the host. */
export const expectedFileSchema = z.strictObject({ schema_version: z.literal(1), cases: z.record(z.string(), z.json()) });

export const FIXTURE_ID = /^[a-z0-9][a-z0-9._-]{0,63}$/;

// ---- setup and egress (section 11) ----

/** A host of an egress allow list: a name, or `*.` and a name (its subdomains, not the name itself). */
export const HOST_PATTERN = /^(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$/;

/**
 * Why an allow entry is not a name the proxy may be asked for, or null. An address in any form
 * (`10.0.0.1`, `2130706433`, `0x7f.1`: a resolver may take each for one) is refused by its last
 * label, which in a name starts with a letter; IPv6 literals never match HOST_PATTERN. A wildcard
 * over a single label (`*.com`) is refused here; over a longer public suffix (`*.co.uk`) by
 * core/egress.ts, which has the public suffix list (kept out of the workflow bundle).
 */
export function hostPatternProblem(pattern: string): string | null {
  if (!HOST_PATTERN.test(pattern)) return 'a host name, optionally starting with *.';
  const labels = pattern.split('.');
  if (!/^[A-Za-z]/.test(labels[labels.length - 1])) return 'a host name, not an address (its last label must start with a letter)';
  if (pattern.startsWith('*.') && labels.length < 3) return 'broader than one registrable domain (a wildcard over a top-level domain)';
  return null;
}

export const hostPattern = z
  .string()
  .max(253)
  .superRefine((p, ctx) => {
    const problem = hostPatternProblem(p);
    if (problem !== null) ctx.addIssue({ code: 'custom', message: `${JSON.stringify(p)}: ${problem}` });
  });

/** The request methods an allow list may let through (where the proxy sees the method). */
export const EGRESS_METHODS = ['GET', 'HEAD', 'OPTIONS', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;
export const DEFAULT_EGRESS_METHODS: readonly (typeof EGRESS_METHODS)[number][] = ['GET', 'HEAD', 'OPTIONS'];

/** The name of a credential of the operator's credentials file (core/egress.ts). */
export const CREDENTIAL_NAME = /^[a-z0-9][a-z0-9._-]{0,63}$/;

/** `setup`: commands run in the run's container before the first decision (SPEC section 11). */
export const setupSchema = z.strictObject({
  commands: z.array(command).min(1).max(32),
  /** For all the commands together. */
  timeout_s: z
    .number()
    .positive()
    .max(24 * 3600),
});
export type SetupSpec = z.infer<typeof setupSchema>;

/** True when `host` (a name) matches `pattern`: the same name, or for `*.suffix` a name below suffix. */
export function hostMatches(pattern: string, host: string): boolean {
  const p = pattern.toLowerCase();
  const h = host.toLowerCase().replace(/\.$/, '');
  return p.startsWith('*.') ? h.endsWith(p.slice(1)) && h.length > p.length - 1 : h === p;
}

/**
 * `egress`: what the setup phase may reach through the proxy. `allow` names hosts, `methods` the
 * methods of requests the proxy can see (plain HTTP, and HTTPS it intercepts; a CONNECT tunnel
 * passes with its method unseen), `credentials` names credentials of the worker operator's
 * credentials file, whose headers the proxy sets (a repository names them, never defines them).
 */
export const egressSchema = z.strictObject({
  allow: z.array(hostPattern).max(64),
  methods: z.array(z.enum(EGRESS_METHODS)).min(1).optional(),
  /**
   * HTTPS through the proxy: `tunnel` (default), a CONNECT tunnel the proxy sees only the name
   * of; `intercept`, TLS ended at the proxy with a certificate authority made for the setup
   * (its key stays in the proxy), so methods, credentials and the audit apply inside HTTPS too.
   */
  tls: z.enum(['tunnel', 'intercept']).optional(),
  credentials: z
    .array(
      z
        .string({
          error:
            "the name of a credential of the worker's credentials file (a repository names a credential; its variable, header and hosts are the operator's)",
        })
        .regex(CREDENTIAL_NAME, 'a credential name: lowercase letters, digits, . _ - (at most 64)'),
    )
    .max(16)
    .refine((names) => new Set(names).size === names.length, 'each credential once')
    .optional(),
});
export type EgressSpec = z.infer<typeof egressSchema>;

export const fixtureSchema = z.strictObject({
  schema_version: z.literal(1),
  id: z.string().regex(FIXTURE_ID, 'fixture id: lowercase letters, digits, . _ -'),
  task: z.string().min(1),
  writable: z.array(z.string().min(1)),
  new_files: z.array(z.string().min(1)),
  tests: testsSchema,
  acceptance: acceptanceSchema,
  budgets: budgetsSchema,
  /** Sub-runs for this fixture's runs (a run's input may set its own). */
  subruns: z.lazy(() => subrunsSchema).optional(),
  /** Commands run before the first decision, on the docker backend (SPEC section 11). */
  setup: setupSchema.nullable().optional(),
  /** What the setup phase may reach through the egress proxy. */
  egress: egressSchema.nullable().optional(),
  /** The task's own FAIL_TO_PASS and PASS_TO_PASS ids, and whether its tests may change. */
  verdict: taskVerdictSchema.optional(),
  /** Where a fixture taken from a real project comes from: repo/ is the tree at base_commit. */
  origin: z
    .strictObject({
      repository: z.string().regex(/^https:\/\/[^\s]+$/, 'an https URL'),
      fix_commit: z.string().regex(/^[0-9a-f]{40}$/, 'a 40-digit commit id'),
      base_commit: z.string().regex(/^[0-9a-f]{40}$/, 'a 40-digit commit id'),
      license: z.string().min(1),
      notes: z.string().optional(),
    })
    .optional(),
});
export type Fixture = z.infer<typeof fixtureSchema>;

/** A fixture's or a repository's `egress` makes sense only with a `setup`, the one phase it applies to. */
export function setupProblem(s: { setup?: SetupSpec | null; egress?: EgressSpec | null }): string | null {
  return s.egress && !s.setup ? 'egress applies to the setup phase only: give setup.commands, or leave egress out' : null;
}

/**
 * The rules a run works under: a fixture's, or those a repository run derives from its
 * `.coding-agent.json` (patterns for writable, protected patterns, acceptance optional). A
 * fixture is one as it stands.
 */
export interface RunSpec {
  /** The fixture's id, or a repository run's name (a batch task's id). */
  id: string;
  task: string;
  writable: string[];
  new_files: string[];
  /** Repository runs: patterns no write may touch. */
  protected?: string[];
  /** Repository runs: `writable` holds patterns rather than exact paths. */
  writable_match?: 'exact' | 'pattern';
  tests: TestsSpec;
  /** Null when a repository run has no acceptance: the record then says `acceptance: null`. */
  acceptance: AcceptanceSpec | null;
  budgets: Budgets;
  /** Sub-runs for this spec's runs (a run's input may set its own). */
  subruns?: Subruns;
  /** Commands run before the first decision (docker backend only), and what they may reach. */
  setup?: SetupSpec | null;
  egress?: EgressSpec | null;
  /** The task's own verdict, by reference (loadRun keeps the lists and the test patch in the host store). */
  verdict_ref?: VerdictRef;
}

// ---- decisions and replays (section 5) ----

export const decisionSchema = z.discriminatedUnion('kind', [
  z.strictObject({ kind: z.literal('plan'), text: z.string() }),
  // The call stays raw here: a malformed call is the model's mistake and becomes a tool result.
  z.strictObject({ kind: z.literal('tool'), call: z.unknown() }),
  z.strictObject({ kind: z.literal('model_error'), transient: z.boolean() }),
  z.strictObject({ kind: z.literal('final'), text: z.string() }),
]);
export type Decision = z.infer<typeof decisionSchema>;

/** A replay's own decisions; an orchestrating replay also drives its tasks, by title (SPEC 12). */
export interface Replay {
  schema_version: 1;
  decisions: Decision[];
  children?: Record<string, Replay>;
}

export const replaySchema: z.ZodType<Replay> = z.strictObject({
  schema_version: z.literal(1),
  decisions: z.array(decisionSchema),
  children: z
    .record(
      z.string().min(1).max(120),
      z.lazy(() => replaySchema),
    )
    .optional(),
});

/**
 * A model endpoint, as the worker's operator lists it in the providers file (SPEC section 9): the
 * kind of API, where it is, and which of the worker's environment variables holds its key. A run
 * names an endpoint; it never names a URL or a variable.
 */
export const endpointSchema = z.strictObject({
  name: matching(/^[a-z0-9][a-z0-9._-]{0,63}$/, 'endpoint name: lowercase letters, digits, . _ - (at most 64)'),
  kind: z.enum(['openai', 'anthropic']),
  base_url: z
    .url()
    .refine((u) => /^https?:\/\//.test(u), 'an http or https URL')
    .optional(),
  api_key_env: z.string().regex(ENV_NAME, 'the name of an environment variable'),
  /** When given, the only models a run may ask of this endpoint. */
  models: z.array(z.string().min(1)).min(1).optional(),
});
export type Endpoint = z.infer<typeof endpointSchema>;

export const providersFileSchema = z
  .strictObject({ schema_version: z.literal(1), endpoints: z.array(endpointSchema) })
  .refine((f) => new Set(f.endpoints.map((e) => e.name)).size === f.endpoints.length, {
    message: 'endpoint names must be unique',
    path: ['endpoints'],
  });
export type ProvidersFile = z.infer<typeof providersFileSchema>;

/** Where decisions come from: a replay file, or a model behind one of the operator's endpoints. */
export const decisionSourceSchema = z.discriminatedUnion('kind', [
  z.strictObject({ kind: z.literal('replay'), path: z.string().min(1), trusted: z.boolean() }),
  z.strictObject({
    kind: z.literal('provider'),
    endpoint: endpointSchema.shape.name,
    model: z.string().min(1).max(200),
  }),
]);
export type DecisionSource = z.infer<typeof decisionSourceSchema>;

// ---- the run's input (section 1) ----

export const approverSchema = z.union([z.literal('interactive'), matching(/^policy:[a-z0-9-]+$/)]);

/** Sub-runs (SPEC section 12): off unless a run's input enables them. */
export const subrunsSchema = z.strictObject({
  /** Tasks a run may dispatch in all. */
  max_children: z.int().min(1).max(50),
  /** Tasks running at once. */
  max_active: z.int().min(1).max(10),
  /** How deep tasks may nest: 1 lets this run dispatch, and its tasks not. */
  max_depth: z.int().min(1).max(3).default(1),
});
export type Subruns = z.output<typeof subrunsSchema>;

/**
 * What a parent gives the child run of a task (set by the workflow; a run whose Temporal parent is
 * not `parent_workflow_id` refuses it).
 */
export const childSchema = z.strictObject({
  parent_workflow_id: z.string().min(1),
  task_id: z.string().min(1),
  title: z.string().min(1).max(120),
  /** The validated dispatch_task call in the host store: its requirements, facts and advice make the task. */
  dispatch_ref: digest,
  /** Paths the task may change (a subset of the parent's); null: all the parent may change. */
  paths: z.array(z.string().min(1)).nullable(),
  /** The parent's run id: its workspace is the task's starting point. */
  from_run: z.string().min(1),
  /** The parent's host queue: the task runs where the workspace is. */
  host_queue: z.string().nullable(),
  /** The replay of this task (a digest in the host store), or null for the parent's live source. */
  replay_digest: z.string().nullable(),
  /** Depth of this task: 1 for a task of a top-level run. */
  depth: z.int().min(1),
  /** A reopened task: the run it continues (its workspace and transcript) and the message it takes. */
  reopen: z
    .strictObject({
      run_id: z.string().min(1),
      transcript_head: z.string().nullable(),
      /** The replay cursor and trace numbering the last run of the task ended at. */
      cursor: z.int().min(0),
      next_seq: z.int().min(1),
      message: z.string().min(1),
    })
    .nullable(),
});
export type ChildInput = z.infer<typeof childSchema>;

/**
 * A fork: a new run that starts from another run's state after one of its turns (its workspace,
 * its transcript, the rest of its replay), made by `fork`. The worker restores that state from
 * what its host keeps of the forked run and refuses the fork where it no longer can.
 */
export const forkSchema = z.strictObject({
  /** The forked run: its workflow id (the new run's record names it) and its first execution's run id. */
  workflow_id: z.string().min(1).max(256),
  run_id: matching(/^[A-Za-z0-9_.-]{1,128}$/, 'a run id: 1-128 characters of [A-Za-z0-9_.-]'),
  /** The turn after which the new run starts (0: before the first). */
  turn: z.int().min(0).max(1_000_000),
  /** The forked run's final transcript head (its outcome's): the first `turn` turns are taken from it. */
  transcript: digest.nullable(),
  /** A replay source: the forked run's replay as it read it (a digest in the host store); the new run goes on from its cursor. */
  replay_digest: digest.optional(),
  /** The new run's task, instead of the forked run's. */
  task: z.string().min(1).max(65_536).optional(),
});
export type ForkInput = z.infer<typeof forkSchema>;

/** A commit id: 40 hex digits (SHA-1 repositories) or 64 (SHA-256). */
export const COMMIT_ID = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/;

/**
 * A repository run's source of work (SPEC section 10): a git repository on the worker's machine,
 * the commit whose tree the workspace starts from (resolved by the command line, so the run never
 * depends on where a branch points later), and the task in words. `tests` and `acceptance`
 * override the repository's settings (a batch task may name them); acceptance's `dir` is a host
 * folder with `expected.json` and the runner files.
 */
export const repoSourceSchema = z.strictObject({
  /** A folder with `.git`, or a bare repository; absolute, or relative to the worker's working directory. */
  path: z.string().min(1),
  base_commit: matching(COMMIT_ID, 'a full commit id (40 or 64 hex digits)'),
  task: z
    .string()
    .min(1)
    .max(64 * 1024),
  /** The run's name in records (a batch task's id); default the repository folder's name. */
  id: matching(FIXTURE_ID, 'id: lowercase letters, digits, . _ - (at most 64)').optional(),
  tests: testsSchema.optional(),
  acceptance: acceptanceSchema.extend({ dir: z.string().min(1) }).optional(),
  /**
   * The user trusts the repository's content (`--trust-repository`): on the local backend its
   * tests and their configuration run on the worker's host with the worker's rights, so a
   * repository run there needs it (and a worker whose operator allows local runs).
   */
  trusted: z.boolean().optional(),
  /**
   * A host file of the task's own verdict (verdictFileSchema: a SWE-bench instance's FAIL_TO_PASS,
   * PASS_TO_PASS and test patch), read by the worker into its store; the model never sees it.
   */
  verdict_file: z.string().min(1).optional(),
});
export type RepoSource = z.infer<typeof repoSourceSchema>;

export const runInputSchema = z
  .strictObject({
    /** Fixture folder, absolute or relative to the worker's working directory. */
    fixture: z.string().min(1).optional(),
    /** A repository run instead of a fixture (exactly one of the two). */
    repo: repoSourceSchema.optional(),
    source: decisionSourceSchema,
    /** The docker backend's image for this run (default: the repository's settings, else the worker's sandbox image). */
    image: z.string().min(1).max(256).optional(),
    backend: z.enum(['local', 'docker']).default('local'),
    approver: approverSchema.default('interactive'),
    budgets: budgetsSchema.partial().optional(),
    /**
     * Seconds a task for the run's host may wait unpolled before the run ends `failed` /
     * `host_lost` (default 600): the host that holds its workspace is taken as gone.
     */
    host_lost_s: z
      .number()
      .int()
      .min(1)
      .max(7 * 24 * 3600)
      .optional(),
    /** Sub-runs: the orchestration tools, and how many tasks. */
    subruns: subrunsSchema.optional(),
    /** The prompt version a live source uses (`v1`, `v2`...); default: the worker's newest. */
    prompt: promptVersionSchema.optional(),
    /** Set only by a parent run for the child run of one of its tasks. */
    child: childSchema.optional(),
    /** A fork of another run after one of its turns (`fork`). */
    fork: forkSchema.optional(),
    /**
     * The user lets the run change the files that configure its test runner (`--allow-test-config-change`):
     * the verifier then runs the tests with the run's versions and does not fail it for them. Only
     * the user's command line sets it; a repository's settings cannot.
     */
    allow_test_config_change: z.boolean().optional(),
  })
  .refine((input) => (input.fixture === undefined) !== (input.repo === undefined), {
    message: 'a run works on a fixture or on a repository: give exactly one of fixture and repo',
    path: ['fixture'],
  })
  .refine((input) => input.fork === undefined || input.child === undefined, {
    message: "a task's run is not a fork: give at most one of child and fork",
    path: ['fork'],
  });
export type RunInput = z.input<typeof runInputSchema>;
export type ParsedRunInput = z.output<typeof runInputSchema>;

// ---- approvals (section 4) ----

/** A client message's id: 1-128 characters of [A-Za-z0-9_.:/-]. */
export const MESSAGE_ID = matching(/^[A-Za-z0-9_.:\/-]{1,128}$/, 'message_id: 1-128 characters of [A-Za-z0-9_.:/-]');

export const approvalSignalSchema = z.strictObject({
  action_id: digest,
  decision: z.enum(['approve', 'reject']),
  args_digest: digest,
  workspace_digest: digest,
  principal: z.string().min(1).max(200).optional(),
  reason: z.string().max(2000).optional(),
  /** Derived from where the approval was given (a command, a console form): a repeat is ignored. */
  message_id: MESSAGE_ID.optional(),
});
export type ApprovalSignal = z.infer<typeof approvalSignalSchema>;

/** A write that passed every check and waits for (or has) its approval. */
export interface PendingAction {
  action_id: string;
  /** The file written (a merge's first path). */
  path: string;
  /** Every path of a merge (merge_task writes several files as one action); absent for apply_patch. */
  paths?: string[];
  before: string; // digest, or "absent"
  after: string;
  args_digest: string;
  workspace_digest: string;
  /** Unified diff of this one action, capped. */
  diff: string;
  diff_truncated: boolean;
  /**
   * When `diff` was cut: the host store's digest of the whole diff (a JSON string), kept on the
   * host that prepared the action. Absent when the whole diff was over the store's cap, and in
   * actions prepared before it was kept.
   */
  diff_ref?: string;
}

/** Isolation evidence of the docker backend, measured by a probe with the run's exact settings. */
export interface IsolationEvidence {
  verified: boolean;
  checks: Record<string, { ok: boolean; detail: string }>;
  image_id: string | null;
  settings: unknown;
  /** Why no probe could run, e.g. `runtime_unavailable`. */
  reason_detail?: string;
}

// ---- verification, statuses and the record (sections 6-7) ----

export type RunStatus = 'running' | 'awaiting_approval' | 'verifying' | 'completed' | 'failed' | 'cancelled' | 'budget_exhausted';

export const TERMINAL_STATUSES: ReadonlySet<RunStatus> = new Set(['completed', 'failed', 'cancelled', 'budget_exhausted']);

export interface TestCounts {
  discovered: number;
  passed: number;
  failed: number;
}

export interface VerifierFindings {
  passed: boolean;
  /** Protected paths that differ from the baseline (changed, deleted or created). */
  protected_changed: string[];
  candidate_tests: TestCounts & {
    status: string;
    error: string | null;
    /** Each outcome's count, and the host store's digest of every test with its outcome (absent in findings from before them). */
    outcomes?: OutcomeCounts;
    tests_ref?: string | null;
  };
  /**
   * Null when the run has no acceptance (a repository run without one). `tests_ref`: the host
   * store's digest of each case with its outcome (absent in findings from before it).
   */
  acceptance: { total: number; passed: number; failed: string[]; error: string | null; tests_ref?: string } | null;
  diff_paths: string[];
  /** What the verifier's own test and acceptance processes changed in the workspace, undone (absent: nothing). */
  unreceipted?: UnreceiptedChange[];
  /** The verdict by named tests (absent in findings from before it). */
  verdict?: TestVerdict;
  /** Paths the verifier's own test or acceptance processes changed (absent: none): the verification failed. */
  verification_tampered?: string[];
  /**
   * Files that configure the test runner and differ from the base (absent: none). The verifier
   * ran the tests with the base's versions, and failed the run unless `test_config_allowed`.
   */
  test_config_changed?: string[];
  test_config_allowed?: boolean;
}

/** The candidate tests at the untouched base tree: how they ended and each outcome's count. */
export interface BaseTests {
  status: string;
  outcomes: OutcomeCounts;
  /** The host store's digest of every test with its outcome. */
  tests_ref: string | null;
  /** True when this host had the outcomes of the same tree and command already (an earlier run or epoch). */
  cached: boolean;
}

/** Ids a task names and how many of them passed at the end. */
export interface NamedCheck {
  total: number;
  passed: number;
  /** The ids that did not pass (discovered or not), at most NAMED_MAX. */
  failed: string[];
}

/**
 * A verdict decided by named tests (SPEC section 6). Each list holds at most NAMED_MAX ids, in
 * order; `counts` says how many each had.
 */
export interface TestVerdict {
  /**
   * What decided: `base` (every test that passed at the base must be discovered and pass), `task`
   * (the task's FAIL_TO_PASS and PASS_TO_PASS ids), or `counts` when the base gave no usable
   * outcome (every test must pass, with at least one).
   */
  decided_by: 'base' | 'task' | 'counts';
  base: BaseTests | null;
  /** Failed at the base, pass now. */
  fixed_tests: string[];
  /** Passed at the base (or named PASS_TO_PASS / FAIL_TO_PASS), not discovered at the end. */
  tests_lost: string[];
  /** Passed at the base (or named PASS_TO_PASS), discovered and not passing at the end. */
  tests_regressed: string[];
  /** Not at the base and failing at the end (a `base` verdict: new tests must pass too). */
  new_tests_failed: string[];
  /** Failed at the end, then passed when run once more: counted as passing, named here. */
  flaky: string[];
  /** A test whose file an approved write deleted or renamed, when the task says tests may change: not counted lost. */
  tests_removed: string[];
  fail_to_pass: NamedCheck | null;
  pass_to_pass: NamedCheck | null;
  counts: Record<'fixed_tests' | 'tests_lost' | 'tests_regressed' | 'new_tests_failed' | 'flaky' | 'tests_removed', number>;
  /** What the verdict decided, in words. */
  decision: string;
}

/**
 * What one test or acceptance process changed in the workspace, undone before the next step
 * (never verified, branched, patched or merged): the first paths, sorted, and how many there were.
 */
export interface UnreceiptedChange {
  step: 'run_tests' | 'verifier_tests' | 'acceptance';
  paths: string[];
  count: number;
}

/**
 * Model usage, the one type for it: of one model call (`model_calls: 1`, as a provider adapter
 * reads it from a reply and `decide` prices it) and of a whole run (the sum, SPEC section 7).
 */
export interface Usage {
  model_calls: number;
  input_tokens: number;
  output_tokens: number;
  cached_tokens: number;
  /** Null when the model's price is not configured (or not applied yet): never guessed. */
  cost_usd: number | null;
}

/** `total` with one more call's usage added; a cost stays null once any call had none. */
export function addUsage(total: Usage | null, step: Usage): Usage {
  const t = total ?? { model_calls: 0, input_tokens: 0, output_tokens: 0, cached_tokens: 0, cost_usd: 0 };
  return {
    model_calls: t.model_calls + step.model_calls,
    input_tokens: t.input_tokens + step.input_tokens,
    output_tokens: t.output_tokens + step.output_tokens,
    cached_tokens: t.cached_tokens + step.cached_tokens,
    cost_usd: t.cost_usd === null || step.cost_usd === null ? null : t.cost_usd + step.cost_usd,
  };
}

/** The run a fork started from, and the turn after which it did. */
export interface ForkedFrom {
  workflow_id: string;
  turn: number;
}

export interface RunRecord {
  fixture: string;
  replay: string | null;
  status: RunStatus;
  reason: RunReason | null;
  writes: number;
  receipts: number;
  red_observed: boolean;
  diff_paths: string[];
  candidate_tests: TestCounts | null;
  acceptance: { total: number; passed: number; failed: string[] } | null;
  tool_errors: Partial<Record<ErrorCode, number>>;
  /** Decisions asked for (a live reply is one turn), and tool calls proposed. */
  turns: number;
  tool_calls: number;
  /** Calls identical to one made earlier with no write in between; replies with neither a call nor text. */
  repeated_calls: number;
  empty_replies: number;
  /** Test and acceptance processes that changed the workspace (each change undone, traced as `unreceipted_change`). */
  unreceipted_changes: number;
  /** The verdict by named tests, as verification found it (absent for a run that was not verified, and in older records). */
  verdict?: RecordVerdict;
  usage?: Usage;
  /** A live source's prompt version and the digest of its content (the same for the same prompt files). */
  prompt?: PromptRef;
  /** An orchestrating run's sub-run figures (SPEC section 12). */
  subruns?: SubrunCounts;
  /** An orchestrating run's tasks and how each ended. */
  tasks?: { task_id: string; title: string; status: RunStatus; reason: RunReason | null }[];
  /** A run with a setup phase: the requests its proxy let through and refused (none for a cached setup). */
  egress?: EgressSummary;
  /** A repository run: whether the user trusted its content (`--trust-repository`); absent for a fixture. */
  trust_repository?: boolean;
  /** An orchestrating run: what its whole tree spent (itself, and every run of its tasks with their own tasks). */
  tree?: TreeSpend;
  /** A fork (`fork`): the run it started from and the turn after which it did. */
  forked_from?: ForkedFrom;
  /** A run that ended `max_cost_usd`: its budget, what it had spent, and what the next call could have cost. */
  cost_limit?: CostLimit;
  /**
   * The run's OpenTelemetry trace id, or null when its worker exports no traces. Not in
   * report.json (which stays byte-identical for the same inputs): a batch puts it in
   * timings.json and report.html.
   */
  trace_id: string | null;
}

/** The verdict as a run's record carries it: what decided, the counts at the base and at the end, and the tests and paths it names. */
export interface RecordVerdict {
  decided_by: TestVerdict['decided_by'];
  base: OutcomeCounts | null;
  end: OutcomeCounts | null;
  fixed_tests: string[];
  tests_lost: string[];
  tests_regressed: string[];
  new_tests_failed: string[];
  flaky: string[];
  fail_to_pass: NamedCheck | null;
  pass_to_pass: NamedCheck | null;
  verification_tampered: string[];
  test_config_changed: string[];
}

/** What a run tree spent: its runs (each execution of a reopened task counts), turns, tool calls and model usage. */
export interface TreeSpend {
  runs: number;
  turns: number;
  tool_calls: number;
  /** Null when no run of the tree called a model. */
  usage: Usage | null;
}

/** Why a run stopped for its cost budget (docs/sub-runs.md says how the next call is estimated). */
export interface CostLimit {
  max_cost_usd: number;
  /** What the run had spent or holds (an orchestrating run: with its tasks' spending and reservations). */
  spent_usd: number;
  /** The most the next call could have cost; null when the budget was spent already. */
  next_call_usd: number | null;
}

/** `a` and `b` summed; null is nothing spent (a run that made no model call). */
export function sumUsage(a: Usage | null, b: Usage | null): Usage | null {
  return a === null ? b : b === null ? a : addUsage(a, b);
}

/** What the egress proxy of a setup phase let through and refused. */
export interface EgressSummary {
  allowed: number;
  denied: number;
}

/** What an orchestrating run did with its tasks; `unknown_task` and `messages_to_ended` measure mis-dispatch. */
export interface SubrunCounts {
  dispatched: number;
  messages: number;
  stops: number;
  merges: number;
  unknown_task: number;
  messages_to_ended: number;
}
