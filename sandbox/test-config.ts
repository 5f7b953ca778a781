/**
 * The files that configure a test runner, and which of them a run changed. The verifier runs the
 * tests with the base tree's versions of these (sandbox/verifier.ts), so a `conftest.py` the model
 * wrote cannot turn failures into passes, nor a `pyproject.toml` add `-p` plugins, nor a
 * `package.json` swap its test script; a run that changed one is reported `test_config_changed`.
 *
 * What counts, whatever the fixture's format (a repository may carry several runners):
 * - pytest: `conftest.py` at any depth; `pytest.ini`, `.pytest.ini`, `pytest.toml`, `.pytest.toml`;
 *   the pytest sections of `pyproject.toml` (`[tool.pytest...]`), `setup.cfg` (`[tool:pytest]`) and
 *   `tox.ini` (`[pytest]`), and in them any line that names pytest (a dotted key, an inline table);
 *   a module that would stand in for the runner or its plugin system at the root (`pytest.py`,
 *   `pytest/`, `_pytest/`, `pluggy/`, `py.py`), and `sitecustomize.py`, `usercustomize.py`;
 * - Node: `package.json`'s test scripts (`test`, `pretest`, `posttest`) and runner keys (`jest`,
 *   `mocha`, `ava`, `c8`, `nyc`, `tap`, `vitest`), the configuration files of jest, vitest, vite,
 *   mocha, ava, tap, karma and babel (which transforms test files);
 * - any format: the module a `-m NAME` command runs (`NAME.py`, `NAME/`), and for the junit format
 *   the script a command names as its first argument.
 * A file's other sections (a project's dependencies, its other tools) are the run's to change.
 * Files are compared as the manifest sees them; a file over the cap counts as changed whole.
 */
import { basename } from 'node:path';
import { canonicalJson } from '../core/canonical';
import type { TestsSpec } from '../core/contracts';
import type { ManifestEntry } from '../workspace/manifest';
import type { ConfigChange } from '../workspace/verification-tree';

export type { ConfigChange };

/** A configuration file over this size is compared and restored whole. */
export const CONFIG_FILE_MAX = 1024 * 1024;

const ANY_DEPTH = new Set(['conftest.py', 'pytest.ini', '.pytest.ini', 'pytest.toml', '.pytest.toml', 'package.json']);
const SECTIONED = new Set(['pyproject.toml', 'setup.cfg', 'tox.ini']);
const ROOT_MODULES = ['pytest', '_pytest', 'pluggy', 'py', 'sitecustomize', 'usercustomize'];
const NODE_CONFIG =
  /^(jest\.config|vitest\.config|vitest\.workspace|vite\.config|babel\.config|ava\.config|karma\.conf)\.[A-Za-z]+$|^\.(mocharc|babelrc|taprc|c8rc|nycrc)(\.[A-Za-z]+)?$/;
const PACKAGE_KEYS = ['jest', 'mocha', 'ava', 'c8', 'nyc', 'tap', 'vitest'];
const PACKAGE_SCRIPTS = ['test', 'pretest', 'posttest'];

/** The modules (root-level) and scripts a test command runs from the tree. */
function runnerFiles(tests: TestsSpec): { modules: string[]; scripts: string[] } {
  const argv = tests.command;
  const modules = [...ROOT_MODULES];
  const scripts: string[] = [];
  const m = argv.indexOf('-m');
  if (m > 0 && argv[m + 1] !== undefined) modules.push(argv[m + 1].split('.')[0]);
  if (tests.format === 'junit' && argv[1] !== undefined && !argv[1].startsWith('-')) scripts.push(argv[1].replace(/^\.\//, ''));
  return { modules, scripts };
}

/** Whether `path` (repo-relative) configures the test runner of `tests`. */
export function isTestConfig(path: string, tests: TestsSpec): boolean {
  const name = basename(path);
  if (ANY_DEPTH.has(name) || SECTIONED.has(name) || NODE_CONFIG.test(name)) return true;
  const { modules, scripts } = runnerFiles(tests);
  const top = path.split('/')[0];
  if (modules.some((m) => path === `${m}.py` || top === m)) return true;
  return scripts.includes(path);
}

const SECTION_NAMES: Record<string, (header: string) => boolean> = {
  'pyproject.toml': (h) => h === 'tool.pytest' || h.startsWith('tool.pytest.'),
  'setup.cfg': (h) => h === 'tool:pytest',
  'tox.ini': (h) => h === 'pytest',
};

/** A sectioned file's part that configures pytest: its pytest sections, and every other line naming pytest. */
export function pytestPart(name: string, text: string): string {
  const inSection = SECTION_NAMES[name];
  const kept: string[] = [];
  let taking = false;
  for (const line of text.split(/\r?\n/)) {
    const header = /^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$/.exec(line);
    if (header) taking = inSection(header[1].replace(/["']/g, ''));
    if (taking || /pytest/i.test(line)) kept.push(line.trimEnd());
  }
  return kept.join('\n');
}

/** package.json's part that configures a runner (null: it does not parse, so all of it does). */
export function packagePart(text: string): Record<string, unknown> | null {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return null;
  }
  if (json === null || typeof json !== 'object' || Array.isArray(json)) return null;
  const o = json as Record<string, unknown>;
  const scripts = (o.scripts !== null && typeof o.scripts === 'object' ? o.scripts : {}) as Record<string, unknown>;
  const part: Record<string, unknown> = {};
  for (const key of PACKAGE_SCRIPTS) if (key in scripts) part[`scripts.${key}`] = scripts[key];
  for (const key of PACKAGE_KEYS) if (key in o) part[key] = o[key];
  return part;
}

/**
 * package.json as the verifier runs it: the run's file with the base's test scripts and runner
 * keys (the run's dependencies and exports stay); the base's whole file when the run's does not parse.
 */
function packageWithBasePart(base: string, current: string): string {
  const ours = JSON.parse(current) as Record<string, unknown>;
  const theirs = JSON.parse(base) as Record<string, unknown>;
  const scripts = { ...((ours.scripts as Record<string, unknown> | undefined) ?? {}) };
  const baseScripts = (theirs.scripts as Record<string, unknown> | undefined) ?? {};
  for (const key of PACKAGE_SCRIPTS) {
    if (key in baseScripts) scripts[key] = baseScripts[key];
    else delete scripts[key];
  }
  const merged: Record<string, unknown> = { ...ours, scripts };
  for (const key of PACKAGE_KEYS) {
    if (key in theirs) merged[key] = theirs[key];
    else delete merged[key];
  }
  return `${JSON.stringify(merged, null, 2)}\n`;
}

type Read = (path: string) => Buffer | null;

const sameEntry = (a: ManifestEntry | undefined, b: ManifestEntry | undefined) => canonicalJson(a ?? null) === canonicalJson(b ?? null);

/**
 * The configuration files that differ from the base, sorted, each with what the verification tree
 * puts back. `readBase` and `readCurrent` give a regular file's bytes (null: absent or over the cap).
 */
export function testConfigChanges(
  tests: TestsSpec,
  base: ManifestEntry[],
  current: ManifestEntry[],
  readBase: Read,
  readCurrent: Read,
): ConfigChange[] {
  const before = new Map(base.map((e) => [e.path, e]));
  const now = new Map(current.map((e) => [e.path, e]));
  const paths = [...new Set([...before.keys(), ...now.keys()])].filter((p) => isTestConfig(p, tests)).sort();
  const changes: ConfigChange[] = [];
  for (const path of paths) {
    const b = before.get(path);
    const c = now.get(path);
    if (sameEntry(b, c)) continue;
    const baseBytes = b?.kind === 'file' ? readBase(path) : null;
    // A folder that stands in for a runner module: its files are named one by one.
    if (b?.kind === 'dir' && c?.kind === 'dir') continue;
    if (b?.kind === 'file' && c?.kind === 'file') {
      const name = basename(path);
      const ours = readCurrent(path);
      if (baseBytes !== null && ours !== null) {
        if (SECTIONED.has(name)) {
          if (pytestPart(name, baseBytes.toString('utf8')) === pytestPart(name, ours.toString('utf8'))) continue;
        } else if (name === 'package.json') {
          const theirs = packagePart(baseBytes.toString('utf8'));
          const mine = packagePart(ours.toString('utf8'));
          if (theirs !== null && mine !== null) {
            if (canonicalJson(theirs) === canonicalJson(mine)) continue;
            changes.push({ path, restore: Buffer.from(packageWithBasePart(baseBytes.toString('utf8'), ours.toString('utf8'))) });
            continue;
          }
        }
      }
    }
    changes.push({ path, restore: b === undefined ? null : 'base' });
  }
  return changes;
}
