/**
 * A repository's rules, pure: path patterns with `**`, `.coding-agent.json` validated strictly
 * with every error naming its field, the detected test command, the AGENTS.md cap, and the
 * policy of a repository run beside a fixture's unchanged one.
 */
import { globMatches, globProblem } from '../core/paths';
import { evaluatePolicy, foldPath, isWritable, mayCreate } from '../core/policy';
import {
  BUILTIN_PROTECTED,
  capInstructions,
  imageAllowed,
  detectTests,
  INSTRUCTIONS_CAP_BYTES,
  parseRepoSettings,
  repositoryName,
  repositorySpec,
  type RepoSettings,
  type TreeView,
} from '../core/repo-settings';
import { linkcheckFixture } from './helpers/run-dir';

function tree(files: Record<string, string>): TreeView {
  const paths = Object.keys(files);
  return {
    has: (p) => p in files,
    someMatches: (pattern) => paths.some((x) => pattern.test(x)),
    read: (p) => files[p] ?? null,
  };
}

describe('path patterns', () => {
  it('matches ** across segments and * within one, and a pattern without ** as before', () => {
    expect(globMatches('**', 'a/b/c.py')).toBe(true);
    expect(globMatches('.git/**', '.git/hooks/pre-commit')).toBe(true);
    expect(globMatches('.git/**', '.github/x')).toBe(false);
    expect(globMatches('.github/**', '.github/workflows/ci.yml')).toBe(true);
    expect(globMatches('src/**/test_*.py', 'src/test_a.py')).toBe(true);
    expect(globMatches('src/**/test_*.py', 'src/a/b/test_a.py')).toBe(true);
    expect(globMatches('src/**/test_*.py', 'src/a/b/atest_a.py')).toBe(false);
    expect(globMatches('**/conftest.py', 'conftest.py')).toBe(true);
    expect(globMatches('**/conftest.py', 'tests/deep/conftest.py')).toBe(true);
    expect(globMatches('tests/test_agent_*.py', 'tests/sub/test_agent_x.py')).toBe(false);
    expect(globMatches('AGENTS.md', 'docs/AGENTS.md')).toBe(false);
  });

  it('names what is wrong with a pattern it does not understand', () => {
    expect(globProblem('src/**.py')).toMatch(/\*\* must be a whole path segment/);
    expect(globProblem('src/[ab].py')).toMatch(/"\[" is not supported/);
    expect(globProblem('src/?.py')).toMatch(/"\?" is not supported/);
    expect(globProblem('/abs/**')).toMatch(/no leading \//);
    expect(globProblem('a//b')).toMatch(/empty segment/);
    expect(globProblem('../x')).toMatch(/\.\. segment/);
    expect(globProblem('src/**')).toBeNull();
  });
});

const SETUP = { commands: [['pip', 'install', '-e', '.']], timeout_s: 600 };

describe('.coding-agent.json', () => {
  it('takes the SPEC example (setup and egress carried), and no file at all', () => {
    const example = {
      schema_version: 1,
      tests: { command: ['python3', '-m', 'pytest', '-q'], format: 'pytest', timeout_s: 300 },
      acceptance: null,
      protected: ['.git/**', '.coding-agent.json', '.github/**', 'AGENTS.md'],
      writable: ['**'],
      new_files: ['**'],
      image: null,
      budgets: { max_turns: 40 },
      setup: { commands: [['pip', 'install', '-e', '.']], timeout_s: 600 },
      egress: { allow: ['pypi.example.internal', '*.registry.example'], credentials: ['private-index'] },
    };
    const parsed = parseRepoSettings(JSON.stringify(example));
    expect(parsed).toMatchObject({ ok: true, settings: { setup: example.setup, egress: example.egress } });
    expect(parseRepoSettings(null)).toEqual({ ok: true, settings: null });
  });

  it("carries setup and egress into the run spec; credentials by name (what each is, is the worker operator's)", () => {
    const parsed = parseRepoSettings(
      JSON.stringify({
        schema_version: 1,
        setup: SETUP,
        egress: { allow: ['*.registry.example'], methods: ['GET'], tls: 'intercept', credentials: ['npm-token', 'private-index'] },
      }),
    );
    expect(parsed.ok).toBe(true);
  });

  it.each([
    ['an unknown field', { schema_version: 1, test: {} }, /\.coding-agent\.json: \(root\): Unrecognized key: "test"/],
    [
      'an unknown field inside tests',
      { schema_version: 1, tests: { command: ['pytest'], format: 'pytest', timeout_s: 5, retries: 2 } },
      /tests: Unrecognized key: "retries"/,
    ],
    [
      'a bad glob',
      { schema_version: 1, protected: ['secrets/**.key'] },
      /protected\.0: "secrets\/\*\*\.key": \*\* must be a whole path segment/,
    ],
    [
      'an unknown test format',
      { schema_version: 1, tests: { command: ['go', 'test'], format: 'gotest', timeout_s: 5 } },
      /tests\.format: Invalid option/,
    ],
    [
      'a junit command without {junit}',
      { schema_version: 1, tests: { command: ['x'], format: 'junit', timeout_s: 5 } },
      /tests\.command: the junit format needs \{junit\}/,
    ],
    [
      'a credential defined in place (a variable, header and host of its own)',
      {
        schema_version: 1,
        setup: SETUP,
        egress: { allow: ['a.example'], credentials: [{ host: 'a.example', header: 'Authorization', env: 'TOKEN' }] },
      },
      /egress\.credentials\.0: the name of a credential of the worker's credentials file/,
    ],
    [
      'a credential name that is no name',
      { schema_version: 1, setup: SETUP, egress: { allow: ['a.example'], credentials: ['Private Index'] } },
      /egress\.credentials\.0: a credential name/,
    ],
    [
      'a credential named twice',
      { schema_version: 1, setup: SETUP, egress: { allow: ['a.example'], credentials: ['token', 'token'] } },
      /egress\.credentials: each credential once/,
    ],
    [
      'an address in the allow list',
      { schema_version: 1, setup: SETUP, egress: { allow: ['a.example', '127.0.0.9'] } },
      /egress\.allow\.1: "127\.0\.0\.9": a host name, not an address/,
    ],
    [
      'a wildcard over a public suffix',
      { schema_version: 1, setup: SETUP, egress: { allow: ['*.co.uk'] } },
      /egress\.allow\.0: "\*\.co\.uk": broader than one registrable domain/,
    ],
    [
      'an allow-list entry that is no host',
      { schema_version: 1, setup: SETUP, egress: { allow: ['https://a.example/'] } },
      /egress\.allow\.0: "https:\/\/a\.example\/": a host name/,
    ],
    [
      'a method the proxy does not know',
      { schema_version: 1, setup: SETUP, egress: { allow: ['a.example'], methods: ['CONNECT'] } },
      /egress\.methods\.0/,
    ],
    ['egress without a setup', { schema_version: 1, egress: { allow: ['a.example'] } }, /egress: egress applies to the setup phase only/],
    ['a setup without commands', { schema_version: 1, setup: { commands: [], timeout_s: 60 } }, /setup\.commands/],
    ['a policy that is no approver', { schema_version: 1, policy: 'yes' }, /policy:/],
    [
      'an approver that approves by itself',
      { schema_version: 1, policy: 'policy:approve-writable' },
      '.coding-agent.json: policy: policy:approve-writable approves writes by itself, and a repository may name only an approver that asks a person (interactive); choose a policy yourself with --approver',
    ],
    ['budgets beyond their maximum', { schema_version: 1, budgets: { max_turns: 1_000_000 } }, /budgets\.max_turns: Too big/],
    ['another schema version', { schema_version: 2 }, /schema_version/],
  ])('refuses %s, naming the field', (_what, settings, message) => {
    const parsed = parseRepoSettings(JSON.stringify(settings));
    expect(parsed.ok).toBe(false);
    expect(!parsed.ok && parsed.detail).toMatch(message);
  });

  it('takes interactive as the approver, the one that asks a person', () => {
    expect(parseRepoSettings(JSON.stringify({ schema_version: 1, policy: 'interactive' }))).toMatchObject({
      ok: true,
      settings: { policy: 'interactive' },
    });
  });

  it('refuses text that is not JSON', () => {
    expect(parseRepoSettings('{"schema_version": 1,')).toMatchObject({
      ok: false,
      detail: expect.stringMatching(/^\.coding-agent\.json is not JSON/),
    });
  });
});

describe('the detected test command', () => {
  it.each([
    [{ 'pyproject.toml': '[project]\nname = "x"\n\n[tool.pytest.ini_options]\ntestpaths = ["tests"]\n' }, /pyproject\.toml/],
    [{ 'pytest.ini': '[pytest]\n' }, /pytest\.ini/],
    [{ 'setup.cfg': '[metadata]\nname = x\n[tool:pytest]\naddopts = -q\n' }, /setup\.cfg/],
    [{ 'tests/test_x.py': 'def test_x(): pass\n' }, /tests\//],
  ])('is pytest when the repository says so (%#)', (files, by) => {
    const detected = detectTests(tree(files));
    expect(detected).toMatchObject({
      ok: true,
      tests: { command: ['python3', '-m', 'pytest', '-q', '-p', 'no:cacheprovider'], format: 'pytest' },
    });
    expect(detected.ok && detected.detected).toMatch(by);
  });

  it("is Node's runner for a `node --test` script, counted through the junit reporter", () => {
    expect(detectTests(tree({ 'package.json': JSON.stringify({ scripts: { test: 'node --test test/' } }) }))).toMatchObject({
      ok: true,
      tests: { command: ['node', '--test', 'test/'], format: 'node-test' },
    });
  });

  it('refuses another runner and an empty repository, saying how to name a test command', () => {
    const jest = detectTests(tree({ 'package.json': JSON.stringify({ scripts: { test: 'jest --coverage' } }) }));
    expect(jest).toMatchObject({
      ok: false,
      detail: expect.stringMatching(/"jest --coverage" is not `node --test \.\.\.`.*\.coding-agent\.json/),
    });
    const none = detectTests(tree({ 'README.md': '# x\n' }));
    expect(none).toMatchObject({ ok: false, detail: expect.stringMatching(/no test command found.*"tests": \{"command"/) });
  });
});

describe('AGENTS.md as project instructions', () => {
  it('goes whole under the cap and is cut to the cap with a visible note above it', () => {
    expect(capInstructions(Buffer.from('Run the tests with pytest.\n'))).toEqual({
      text: 'Run the tests with pytest.\n',
      bytes: 27,
      cut: false,
    });
    const line = 'Prefer small functions; every change comes with a test. ü\n';
    const big = Buffer.from(line.repeat(Math.ceil((1024 * 1024) / Buffer.byteLength(line))));
    expect(big.length).toBeGreaterThanOrEqual(1024 * 1024);
    const cut = capInstructions(big);
    expect(cut.cut).toBe(true);
    expect(cut.bytes).toBe(big.length);
    const [kept, note] = cut.text.split('\n[AGENTS.md is ');
    const keptBytes = Buffer.byteLength(kept);
    expect(keptBytes).toBeLessThanOrEqual(INSTRUCTIONS_CAP_BYTES);
    expect(keptBytes).toBeGreaterThan(INSTRUCTIONS_CAP_BYTES - 100);
    expect(kept.endsWith('\n')).toBe(true); // whole lines, whole characters
    expect(big.subarray(0, keptBytes).toString('utf8')).toBe(kept);
    expect(note).toBe(`${big.length} bytes; only its first ${keptBytes} bytes are shown here (the cap is 32768 bytes).]`);
  });
});

describe("a repository run's policy", () => {
  const spec = repositorySpec({
    id: 'demo',
    task: 't',
    settings: null,
    tests: { command: ['pytest'], format: 'pytest', timeout_s: 5 },
    acceptance: null,
    extraProtected: ['vendor/lib', 'vendor/lib/**'],
  });

  it('writes anywhere but the protected patterns, the submodules and .git', () => {
    expect(spec.protected).toEqual([...BUILTIN_PROTECTED, 'vendor/lib', 'vendor/lib/**']);
    for (const path of ['src/a.py', 'deep/er/x.bin', 'tests/test_new.py']) {
      expect(evaluatePolicy({ name: 'apply_patch' }, path, spec).decision).toBe('ask');
    }
    for (const path of [
      '.coding-agent.json',
      'AGENTS.md',
      '.github/workflows/ci.yml',
      '.git/config',
      'vendor/lib/x.c',
      '.gitlab-ci.yml',
      '.circleci/config.yml',
      'CODEOWNERS',
      'docs/CODEOWNERS',
      '.gitmodules',
      '.pre-commit-config.yaml',
      '.husky/pre-commit',
      '.vscode/tasks.json',
    ]) {
      const evaluation = evaluatePolicy({ name: 'apply_patch' }, path, spec);
      expect(evaluation.decision).toBe('deny');
      expect(evaluation.matched.map((r) => r.id)).toContain('protected-pattern');
    }
    expect(isWritable(spec, 'docs/AGENTS.md')).toBe(true);
    expect(mayCreate(spec, '.github/x')).toBe(false);
  });

  it("protects what makes a developer's tools run code after checkout: package managers, build wrappers, editors, hooks", () => {
    for (const path of [
      '.npmrc',
      '.yarnrc',
      '.yarnrc.yml',
      '.yarn/plugins/plugin.cjs',
      '.pnpmfile.cjs',
      '.cargo/config',
      '.cargo/config.toml',
      'gradlew',
      'gradlew.bat',
      'gradle/wrapper/gradle-wrapper.properties',
      'mvnw',
      'mvnw.cmd',
      '.mvn/wrapper/maven-wrapper.properties',
      '.vscode/tasks.json',
      '.idea/workspace.xml',
      '.zed/tasks.json',
      '.devcontainer/devcontainer.json',
      '.devcontainer.json',
      '.envrc',
      'mise.toml',
      '.bazelrc',
      '.githooks/pre-commit',
    ])
      expect([path, evaluatePolicy({ name: 'apply_patch' }, path, spec).decision]).toEqual([path, 'deny']);
    // Only those names: a file that merely looks alike is source.
    for (const path of ['src/npmrc.py', 'docs/gradlew.md', 'tools/.cargo-config.toml'])
      expect([path, evaluatePolicy({ name: 'apply_patch' }, path, spec).decision]).toEqual([path, 'ask']);
  });

  it('matches protected paths under every name a checkout can open them by: case, Unicode forms, ignored code points, trailing dots', () => {
    const settings = parseRepoSettings(JSON.stringify({ schema_version: 1, protected: ['docs/Légal/**'] }));
    if (!settings.ok) throw new Error(settings.detail);
    const withLegal = repositorySpec({
      id: 'demo',
      task: 't',
      settings: settings.settings,
      tests: spec.tests,
      acceptance: null,
      extraProtected: [],
    });
    for (const path of [
      '.GitHub/workflows/x.yml',
      '.GITHUB/workflows/x.yml',
      '.Husky/pre-commit',
      '.GITATTRIBUTES',
      'Agents.md',
      '.Coding-Agent.json',
      '.NPMRC',
      'GradleW',
      '.git\u200chub/workflows/x.yml', // HFS+ ignores the zero-width non-joiner
      '.github\ufeff/workflows/x.yml',
      '.github./workflows/x.yml', // Windows drops trailing dots and spaces
      '.github /workflows/x.yml',
      '.gitattributes::$DATA', // an NTFS stream of the file
      'Docs/LE\u0301GAL/terms.md', // NFD of "É" against the settings' NFC "é"
      'docs/le\u0301gal/terms.md',
    ])
      expect([path, evaluatePolicy({ name: 'apply_patch' }, path, withLegal).decision]).toEqual([path, 'deny']);
    expect(foldPath('.GitHub\u200b./Workflows/CI.yml')).toBe('.github/workflows/ci.yml');
  });

  it("adds the settings' protected patterns to the built-in ones: an empty list, or one that leaves out .github, protects them still", () => {
    const settings = (value: unknown) => {
      const parsed = parseRepoSettings(JSON.stringify({ schema_version: 1, protected: value }));
      if (!parsed.ok) throw new Error(parsed.detail);
      return parsed.settings;
    };
    const make = (s: RepoSettings | null) =>
      repositorySpec({ id: 'demo', task: 't', settings: s, tests: spec.tests, acceptance: null, extraProtected: [] });
    expect(make(settings([])).protected).toEqual([...BUILTIN_PROTECTED]);
    const added = make(settings(['docs/legal/**', '.github/**']));
    expect(added.protected).toEqual([...BUILTIN_PROTECTED, 'docs/legal/**']);
    for (const path of ['.github/workflows/release.yml', 'docs/legal/terms.md'])
      expect(evaluatePolicy({ name: 'apply_patch' }, path, added).decision).toBe('deny');
  });

  it("leaves a fixture's evaluation as it was: exact writable paths, no protected-pattern rule", () => {
    const fixture = linkcheckFixture();
    expect(evaluatePolicy({ name: 'apply_patch' }, 'src/linkcheck.py', fixture).matched.map((r) => r.id)).toEqual(['writable-file']);
    expect(evaluatePolicy({ name: 'apply_patch' }, 'tests/test_agent_x.py', fixture).matched.map((r) => r.id)).toEqual([
      'allowed-new-file',
    ]);
    expect(evaluatePolicy({ name: 'apply_patch' }, 'README.md', fixture).matched.map((r) => r.id)).toEqual(['protected-path']);
  });

  it('names a repository by its folder', () => {
    expect(repositoryName('/srv/git/My.Project.git')).toBe('my.project');
    expect(repositoryName('checkouts/sqlparse/')).toBe('sqlparse');
  });
});

describe('the images a repository may name', () => {
  it("are the operator's entries as the engine reads references: a missing tag is latest, name:* any tag, nothing else", () => {
    const allowed = ['coding-agent-sandbox:1', 'coding-agent-setup:*', 'registry.local/team/base'];
    for (const image of [
      'coding-agent-sandbox:1',
      'coding-agent-setup:abc123',
      'registry.local/team/base',
      'registry.local/team/base:latest',
    ])
      expect([image, imageAllowed(image, allowed)]).toEqual([image, true]);
    for (const image of [
      'coding-agent-sandbox:2',
      'coding-agent-sandbox',
      'coding-agent-sandbox-pip:1',
      'coding-agent-setup:x/y',
      'evil/coding-agent-sandbox:1',
      'registry.local/team/base:2',
      'sha256:0123',
    ])
      expect([image, imageAllowed(image, allowed)]).toEqual([image, false]);
  });
});
