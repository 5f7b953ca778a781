/**
 * The lint holds the house's arrows (scripts/eslint-house.js, docs/architecture.md): on a small
 * tree of its own, an import against the arrows and an import circle each fail with a message
 * saying where things should go, and imports that follow the arrows pass.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { Linter, type ESLint } from 'eslint';
import tseslint from 'typescript-eslint';
import { PROJECT_ROOT, tempDir } from './helpers/run-dir';

const house = require(join(PROJECT_ROOT, 'scripts', 'eslint-house.js')) as {
  ARROWS: Record<string, string[]>;
  plugin: ESLint.Plugin;
};

/** A tree of the files given, and its lint: each file's messages. */
function lint(files: Record<string, string>): Record<string, string[]> {
  const root = tempDir('lint-house');
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), text);
  }
  const linter = new Linter({ configType: 'flat', cwd: root });
  const config: Linter.Config[] = [
    {
      files: ['**/*.ts'],
      languageOptions: { parser: tseslint.parser as Linter.Parser },
      plugins: { house: house.plugin },
      rules: { 'house/arrows': ['error', { root }], 'house/no-cycle': 'error' },
    },
  ];
  return Object.fromEntries(
    Object.keys(files).map((path) => [
      path,
      linter.verify(readFileSync(join(root, path), 'utf8'), config, { filename: join(root, path) }).map((m) => m.message),
    ]),
  );
}

describe('the lint of the house', () => {
  it('refuses an import against the arrows, naming what the folder may import', () => {
    const found = lint({
      'activities/run.ts': 'export const run = 1;\n',
      'core/rule.ts': "import { run } from '../activities/run';\nexport const rule = run;\n",
      'workflows/loop.ts': "import { rule } from '../core/rule';\nexport const loop = rule;\n",
      'client/cli.ts': "import type { Kit } from '../activities/run';\nexport type Cli = Kit;\n",
    });
    expect(found['core/rule.ts']).toEqual([
      expect.stringMatching(/^core\/ \(pure contracts and rules\) may import only nothing of the house: activities\/ .* is not below it/),
    ]);
    expect(found['client/cli.ts']).toEqual([
      expect.stringMatching(/^client\/ .* may import only core\/, host\/, store\/, workspace\/, sandbox\/, workflows\/: activities\/ /),
    ]);
    expect(found['workflows/loop.ts']).toEqual([]);
    expect(found['activities/run.ts']).toEqual([]);
  });

  it('holds the rooms of the machine, the store and the workspace apart: each may import only the rooms below it', () => {
    const found = lint({
      'host/settings.ts': "import { Store } from '../store/store';\nexport const settings = Store;\n",
      'store/store.ts': "import { prepare } from '../workspace/prepare';\nexport const Store = prepare;\n",
      'workspace/prepare.ts': "import { run } from '../sandbox/run';\nexport const prepare = run;\n",
      'sandbox/run.ts': "import { Ledger } from '../store/ledger';\nexport const run = Ledger;\n",
      'store/ledger.ts': "import { machine } from '../host/machine';\nexport const Ledger = machine;\n",
      'host/machine.ts': 'export const machine = 1;\n',
      'workspace/fork.ts': "import { Ledger } from '../store/ledger';\nexport const fork = Ledger;\n",
    });
    expect(found['host/settings.ts']).toEqual([expect.stringMatching(/^host\/ \(this machine.*\) may import only core\/: store\/ /)]);
    expect(found['store/store.ts']).toEqual([expect.stringMatching(/^store\/ .* may import only core\/, host\/: workspace\/ /)]);
    expect(found['workspace/prepare.ts']).toEqual([
      expect.stringMatching(/^workspace\/ .* may import only core\/, host\/, store\/: sandbox\/ /),
    ]);
    expect(found['sandbox/run.ts']).toEqual([expect.stringMatching(/^sandbox\/ .* may import only core\/, host\/, workspace\/: store\/ /)]);
    expect(found['store/ledger.ts']).toEqual([]);
    expect(found['workspace/fork.ts']).toEqual([]);
  });

  it('refuses an import circle, type imports and re-exports included, naming every file of it', () => {
    const found = lint({
      'workflows/run.ts': "import { TASKS } from './tasks';\nexport const RUN = TASKS;\n",
      'workflows/tasks.ts': "import type { Outcome } from './outcome';\nexport const TASKS = 1 as Outcome;\n",
      'workflows/outcome.ts': "export { RUN } from './run';\nexport type Outcome = number;\n",
      'workflows/free.ts': "import { RUN } from './run';\nexport const free = RUN;\n",
    });
    for (const file of ['workflows/run.ts', 'workflows/tasks.ts', 'workflows/outcome.ts']) {
      expect(found[file]).toEqual([
        expect.stringMatching(/^import circle: .*workflows\/run\.ts -> .*workflows\/tasks\.ts|^import circle: .*workflows\/outcome\.ts/),
      ]);
    }
    expect(found['workflows/free.ts']).toEqual([]);
  });

  it('has an arrow for every folder of the house and none into a folder that is not one', () => {
    expect(Object.keys(house.ARROWS).sort()).toEqual(
      // every folder the build compiles, but the tests
      (JSON.parse(readFileSync(join(PROJECT_ROOT, 'tsconfig.json'), 'utf8')) as { include: string[] }).include
        .filter((f) => f !== 'tests')
        .sort(),
    );
    for (const [folder, below] of Object.entries(house.ARROWS)) {
      for (const b of below) expect([folder, b, b in house.ARROWS]).toEqual([folder, b, true]);
      expect(below).not.toContain(folder);
    }
    // The arrows go one way: no folder reaches itself through them.
    const reaches = (from: string, to: string, seen = new Set<string>()): boolean =>
      house.ARROWS[from].some((b) => b === to || (!seen.has(b) && (seen.add(b), reaches(b, to, seen))));
    for (const folder of Object.keys(house.ARROWS)) expect([folder, reaches(folder, folder)]).toEqual([folder, false]);
  });
});
