/**
 * A repository run's rules (SPEC section 10): the optional `.coding-agent.json` at the root of the
 * base tree, validated strictly; the test command detected when it names none; the project
 * instructions of `AGENTS.md`, capped; and the RunSpec they make. Pure: callers read the tree.
 */
import { z } from 'zod';
import {
  acceptanceSchema,
  approverSchema,
  budgetsSchema,
  egressSchema,
  setupProblem,
  setupSchema,
  subrunsSchema,
  testsSchema,
  type Budgets,
  type RunSpec,
  type TestsSpec,
} from './contracts';
import { egressProblems } from './egress';
import { globProblem, normalizeRepoPath } from './paths';
import { KNOWN_POLICIES, parseApprover } from './policy';

export const SETTINGS_FILE = '.coding-agent.json';
export const INSTRUCTIONS_FILE = 'AGENTS.md';
/** Project instructions beyond this many bytes are cut, with a note saying so. */
export const INSTRUCTIONS_CAP_BYTES = 32 * 1024;

/**
 * Protected in every repository run, whatever the settings say (their `protected` only adds to
 * this): files that decide what runs, where, and who reviews, outside the run's own tests. A
 * write there would act after the run, on a person's machine or a CI runner, with their rights;
 * none is the kind of change a task asks for, so it is denied rather than put to an approver.
 */
export const BUILTIN_PROTECTED = [
  // git: the workspace's .git would not be the repository's, and no tree may hold one; submodule
  // URLs (what `git submodule update` fetches); attributes (filters and diff drivers by name, and
  // `linguist-generated`, which folds a file's diff away in a review).
  '.git',
  '.git/**',
  '.gitmodules',
  '.gitattributes',
  // The harness's own inputs: the run's rules and the model's instructions.
  SETTINGS_FILE,
  INSTRUCTIONS_FILE,
  // CI and ownership: GitHub (workflows, actions, CODEOWNERS in any of its three places), GitLab,
  // CircleCI, Travis, Azure Pipelines, Jenkins, Buildkite, Drone, Bitbucket, AppVeyor, Woodpecker,
  // Gitea and Forgejo Actions.
  '.github/**',
  'CODEOWNERS',
  'docs/CODEOWNERS',
  '.gitlab-ci.yml',
  '.gitlab/**',
  '.circleci/**',
  '.travis.yml',
  'azure-pipelines.yml',
  '.azure-pipelines/**',
  'Jenkinsfile',
  '.buildkite/**',
  '.drone.yml',
  'bitbucket-pipelines.yml',
  'appveyor.yml',
  '.appveyor.yml',
  '.woodpecker.yml',
  '.woodpecker/**',
  '.gitea/**',
  '.forgejo/**',
  // Hook managers: commands run by `git commit` / `git push` on a developer's machine.
  '.pre-commit-config.yaml',
  '.husky/**',
  'lefthook.yml',
  '.lefthook.yml',
  '.githooks/**',
  // Run when the folder is opened: dev containers, editor tasks and run configurations, direnv, mise.
  '.devcontainer/**',
  '.devcontainer.json',
  '.vscode/**',
  '.idea/**',
  '.zed/**',
  '.envrc',
  'mise.toml',
  '.mise.toml',
  // Run by a package manager or a build wrapper on the next install or build: npm's and yarn's
  // settings (a script shell, a registry, yarn's own release and plugins), pnpm's hook file,
  // cargo's configuration (a runner, a linker), the Gradle and Maven wrappers (a downloaded
  // distribution, a script), Bazel's options.
  '.npmrc',
  '.yarnrc',
  '.yarnrc.yml',
  '.yarn/**',
  '.pnpmfile.cjs',
  '.cargo/config',
  '.cargo/config.toml',
  'gradlew',
  'gradlew.bat',
  'gradle/wrapper/**',
  'mvnw',
  'mvnw.cmd',
  '.mvn/**',
  '.bazelrc',
] as const;

/** A repository run's budgets when its settings name none. */
export const DEFAULT_REPO_BUDGETS: Budgets = { max_turns: 40, max_tool_calls: 100, deadline_s: 3600, call_timeout_s: 600 };
/** The test timeout of a detected test command. */
export const DETECTED_TESTS_TIMEOUT_S = 300;

const pattern = z.string().superRefine((p, ctx) => {
  const problem = globProblem(p);
  if (problem !== null) ctx.addIssue({ code: 'custom', message: `${JSON.stringify(p)}: ${problem}` });
});

const repoFolder = z.string().superRefine((p, ctx) => {
  const checked = normalizeRepoPath(p);
  if (!checked.ok) ctx.addIssue({ code: 'custom', message: `${JSON.stringify(p)}: ${checked.reason}` });
  else if (checked.path !== p)
    ctx.addIssue({ code: 'custom', message: `${JSON.stringify(p)}: write it as ${JSON.stringify(checked.path)}` });
});

/**
 * `.coding-agent.json`. Strict: an unknown field is an error, and every error names its field.
 * `setup` and `egress` (SPEC section 11) are the run's setup phase on the docker backend.
 */
export const repoSettingsSchema = z.strictObject({
  schema_version: z.literal(1),
  tests: testsSchema.nullable().optional(),
  /**
   * The hidden acceptance (SPEC section 2's protocol): `dir` is a folder of the base tree with
   * `expected.json` and the runner files. It is left out of the workspace, mounted read-only as
   * `{acceptance}` without `expected.json`, and protected.
   */
  acceptance: acceptanceSchema.extend({ dir: repoFolder }).nullable().optional(),
  protected: z.array(pattern).optional(),
  writable: z.array(pattern).optional(),
  new_files: z.array(pattern).optional(),
  /** The docker backend's image: any image of the worker's engine. */
  image: z.string().min(1).max(256).nullable().optional(),
  budgets: budgetsSchema.partial().optional(),
  /**
   * The approver a run of this repository gets when the command line names none: only one that
   * asks a person. A repository is anyone's text, so it cannot choose a policy that approves alone.
   */
  policy: approverSchema
    .superRefine((approver, ctx) => {
      const problem = repositoryApproverProblem(approver);
      if (problem !== null) ctx.addIssue({ code: 'custom', message: problem });
    })
    .nullable()
    .optional(),
  /** Sub-runs (SPEC section 12) for runs on this repository. */
  subruns: subrunsSchema.optional(),
  /** Commands run in the run's container before the first decision (docker backend only). */
  setup: setupSchema.nullable().optional(),
  /** What the setup phase may reach through the egress proxy, and the operator's credentials it names. */
  egress: egressSchema
    .superRefine((e, ctx) => {
      for (const p of egressProblems(e)) ctx.addIssue({ code: 'custom', path: p.path, message: p.message });
    })
    .nullable()
    .optional(),
});
export type RepoSettings = z.infer<typeof repoSettingsSchema>;

/** Why a repository's settings may not name this approver, or null when they may. */
export function repositoryApproverProblem(approver: string): string | null {
  const parsed = parseApprover(approver);
  if (parsed.kind === 'interactive') return null;
  if (!parsed.known) return `unknown approval policy ${approver} (known: ${KNOWN_POLICIES.join(', ')})`;
  return `${approver} approves writes by itself, and a repository may name only an approver that asks a person (interactive); choose a policy yourself with --approver`;
}

export type SettingsOutcome = { ok: true; settings: RepoSettings | null } | { ok: false; detail: string };

/** `.coding-agent.json`'s text (null when the base tree has none), parsed and checked. */
export function parseRepoSettings(text: string | null): SettingsOutcome {
  if (text === null) return { ok: true, settings: null };
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    return { ok: false, detail: `${SETTINGS_FILE} is not JSON: ${(err as Error).message}` };
  }
  const parsed = repoSettingsSchema.safeParse(raw);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) => `${SETTINGS_FILE}: ${i.path.length ? i.path.join('.') : '(root)'}: ${i.message}`);
    return { ok: false, detail: issues.join('; ') };
  }
  const problem = setupProblem(parsed.data);
  if (problem !== null) return { ok: false, detail: `${SETTINGS_FILE}: egress: ${problem}` };
  return { ok: true, settings: parsed.data };
}

/**
 * What `detectTests` asks of a base tree, all of it known before the tree is read: the files it
 * reads whole, the files it only looks for, and the pattern of a Python test file's path.
 */
export const DETECTION_FILES = ['pyproject.toml', 'setup.cfg', 'package.json'] as const;
export const DETECTION_MARKERS = ['pytest.ini'] as const;
export const PYTHON_TEST_FILE = /^tests?\/(.*\/)?(test_[^/]*|[^/]*_test|conftest)\.py$/;

/** The base tree as the detector sees it: whether it has a path, whether some path matches, and a few small files' text. */
export interface TreeView {
  has(path: string): boolean;
  someMatches(pattern: RegExp): boolean;
  /** The text of a small file of the tree, or null. */
  read(path: string): string | null;
}

export type Detection = { ok: true; tests: TestsSpec; detected: string } | { ok: false; detail: string };

const PYTEST: TestsSpec = {
  command: ['python3', '-m', 'pytest', '-q', '-p', 'no:cacheprovider'],
  format: 'pytest',
  timeout_s: DETECTED_TESTS_TIMEOUT_S,
};

/**
 * The test command when the settings name none: pytest when pyproject.toml, pytest.ini, setup.cfg
 * or a tests/ folder of Python tests say so; Node's runner when package.json's test script is
 * `node --test ...` (its counts come from the junit reporter the harness adds). A script of
 * another runner gives no structured counts by itself, so it is refused with what to write.
 */
export function detectTests(tree: TreeView): Detection {
  const pyproject = tree.read('pyproject.toml');
  if (pyproject !== null && /^\s*\[tool\.pytest[.\]]/m.test(pyproject))
    return { ok: true, tests: PYTEST, detected: 'pytest ([tool.pytest...] in pyproject.toml)' };
  if (tree.has('pytest.ini')) return { ok: true, tests: PYTEST, detected: 'pytest (pytest.ini)' };
  const setupCfg = tree.read('setup.cfg');
  if (setupCfg !== null && /^\s*\[tool:pytest\]/m.test(setupCfg))
    return { ok: true, tests: PYTEST, detected: 'pytest ([tool:pytest] in setup.cfg)' };
  if (tree.someMatches(PYTHON_TEST_FILE)) return { ok: true, tests: PYTEST, detected: 'pytest (Python test files under tests/)' };
  if (pyproject !== null && /\bpytest\b/.test(pyproject)) return { ok: true, tests: PYTEST, detected: 'pytest (named in pyproject.toml)' };

  const pkg = tree.read('package.json');
  if (pkg !== null) {
    let script: unknown;
    try {
      script = (JSON.parse(pkg) as { scripts?: { test?: unknown } }).scripts?.test;
    } catch {
      return { ok: false, detail: `package.json is not JSON, so its test script cannot be read; ${HOW_TO_NAME_TESTS}` };
    }
    if (typeof script === 'string') {
      const words = script.trim().split(/\s+/);
      const plain = words.every((w) => /^[A-Za-z0-9_./=:@+-]+$/.test(w));
      if (plain && words[0] === 'node' && words.includes('--test')) {
        return {
          ok: true,
          tests: { command: words, format: 'node-test', timeout_s: DETECTED_TESTS_TIMEOUT_S },
          detected: `node:test (package.json's test script ${JSON.stringify(script)}, counted through the junit reporter)`,
        };
      }
      return {
        ok: false,
        detail: `package.json's test script ${JSON.stringify(script)} is not \`node --test ...\`, and its runner's counts cannot be read without a JUnit report; ${HOW_TO_NAME_TESTS}`,
      };
    }
  }
  return {
    ok: false,
    detail: `no test command found (no pytest configuration, Python tests under tests/, or a package.json test script); ${HOW_TO_NAME_TESTS}`,
  };
}

export const HOW_TO_NAME_TESTS =
  `name one in ${SETTINGS_FILE} at the repository root, e.g. {"schema_version": 1, "tests": {"command": ["python3", "-m", "pytest", "-q"], "format": "pytest", "timeout_s": 300}} ` +
  '(formats: pytest, node-test, or junit for any runner that writes a JUnit XML report to {junit})';

/** Project instructions as the model gets them: at most the cap, with a visible note when cut. */
export interface Instructions {
  text: string;
  /** Bytes of AGENTS.md as committed. */
  bytes: number;
  cut: boolean;
}

/** Cuts `bytes` to the cap at a line end (or a character boundary) and says so in a note. */
export function capInstructions(bytes: Buffer, cap = INSTRUCTIONS_CAP_BYTES): Instructions {
  if (bytes.length <= cap) return { text: bytes.toString('utf8'), bytes: bytes.length, cut: false };
  let end = cap;
  // Never inside a UTF-8 character: back up over continuation bytes.
  while (end > 0 && (bytes[end] & 0xc0) === 0x80) end--;
  const lineEnd = bytes.lastIndexOf(0x0a, end - 1);
  if (lineEnd >= cap / 2) end = lineEnd + 1;
  const kept = bytes.subarray(0, end).toString('utf8');
  const note = `\n[${INSTRUCTIONS_FILE} is ${bytes.length} bytes; only its first ${end} bytes are shown here (the cap is ${cap} bytes).]`;
  return { text: `${kept}${note}`, bytes: bytes.length, cut: true };
}

/** The protected patterns of a run: the built-in ones, the settings' added to them, and what the run may not touch. */
export function protectedPatterns(settings: RepoSettings | null, extra: string[]): string[] {
  return [...new Set([...BUILTIN_PROTECTED, ...(settings?.protected ?? []), ...extra])];
}

/** The RunSpec of a repository run. */
export function repositorySpec(o: {
  id: string;
  task: string;
  settings: RepoSettings | null;
  tests: TestsSpec;
  acceptance: RunSpec['acceptance'];
  /** Paths the run must leave alone beyond the settings' (submodules, the acceptance folder). */
  extraProtected: string[];
}): RunSpec {
  const s = o.settings;
  return {
    id: o.id,
    task: o.task,
    writable: s?.writable ?? ['**'],
    new_files: s?.new_files ?? ['**'],
    protected: protectedPatterns(s, o.extraProtected),
    writable_match: 'pattern',
    tests: o.tests,
    acceptance: o.acceptance,
    budgets: { ...DEFAULT_REPO_BUDGETS, ...Object.fromEntries(Object.entries(s?.budgets ?? {}).filter(([, v]) => v !== undefined)) },
    ...(s?.subruns ? { subruns: s.subruns } : {}),
    ...(s?.setup ? { setup: s.setup, egress: s.egress ?? null } : {}),
  };
}

/** A repository's name as records show it: its folder's name without `.git`, in the id alphabet. */
export function repositoryName(path: string): string {
  const base = path.replace(/\/+$/, '').split('/').pop() ?? 'repository';
  const name = base
    .replace(/\.git$/, '')
    .toLowerCase()
    .replace(/[^a-z0-9._-]+/g, '-')
    .replace(/^[^a-z0-9]+/, '')
    .slice(0, 64);
  return name === '' ? 'repository' : name;
}

/**
 * Where a repository is read: with the machine's own git only when the user trusts it and its
 * commands run on this machine anyway (the local backend); in a reading container otherwise.
 */
export function repositoryRead(backend: 'local' | 'docker', trusted: boolean | undefined): 'host' | 'sandbox' {
  return backend === 'local' && trusted === true ? 'host' : 'sandbox';
}

/** `name` with its tag: a reference without one means `:latest`, as the engine reads it. */
function withTag(reference: string): string {
  if (reference.startsWith('sha256:') || reference.includes('@')) return reference;
  const slash = reference.lastIndexOf('/');
  return reference.slice(slash + 1).includes(':') ? reference : `${reference}:latest`;
}

/**
 * Whether a repository's settings may name `image`: it must be one of the operator's entries
 * (`name:tag`, a content id, or `name:*` for every tag of a name), compared as the engine reads
 * references; nothing else, however it resolves.
 */
export function imageAllowed(image: string, allowed: readonly string[]): boolean {
  const wanted = withTag(image);
  return allowed.some((entry) => {
    if (entry.endsWith(':*')) {
      const name = entry.slice(0, -2);
      return wanted.startsWith(`${name}:`) && !wanted.slice(name.length + 1).includes('/');
    }
    return withTag(entry) === wanted;
  });
}

/** The one line a repository's image outside the operator's list is refused with. */
export function imageRefusal(image: string): string {
  return `the repository's settings name the image ${image}, which is not one the operator allows repositories to name (AGENT_ALLOWED_IMAGES): ask the operator to list it, or give an image yourself with --image`;
}
