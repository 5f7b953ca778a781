#!/usr/bin/env node
// Builds the project (tsc and the workflow bundle) only when a source is newer than the last
// build, so `npm run agent`, `npm run worker` and `npm test` start at once on a built tree.
// Plain JavaScript on purpose: it runs before anything is compiled.
'use strict';
const { execFileSync } = require('node:child_process');
const { existsSync, readdirSync, statSync, writeFileSync } = require('node:fs');
const { join } = require('node:path');

const root = join(__dirname, '..');
const stamp = join(root, 'dist', '.build-stamp');
/** The source folders: the ones tsconfig.json compiles. */
const SOURCES = require('../tsconfig.json').include;
const FILES = ['tsconfig.json', 'package.json', 'package-lock.json'];
/** Folders the build copies whole (scripts/copy-assets.js): every file and folder of them counts, a removal too. */
const COPIED = ['prompts'];

function newest(path) {
  const st = statSync(path, { throwIfNoEntry: false });
  if (!st) return 0;
  // .py, .sh: sources the build copies into dist (scripts/copy-assets.js), such as the isolation probes.
  if (!st.isDirectory())
    return path.endsWith('.ts') || path.endsWith('.py') || path.endsWith('.sh') || FILES.some((f) => path.endsWith(f)) ? st.mtimeMs : 0;
  return readdirSync(path).reduce((m, name) => Math.max(m, newest(join(path, name))), 0);
}

function newestCopied(path) {
  const st = statSync(path, { throwIfNoEntry: false });
  if (!st) return 0;
  if (!st.isDirectory()) return st.mtimeMs;
  return readdirSync(path).reduce((m, name) => Math.max(m, newestCopied(join(path, name))), st.mtimeMs);
}

const built = existsSync(stamp) ? statSync(stamp).mtimeMs : 0;
const changed = Math.max(
  ...SOURCES.map((d) => newest(join(root, d))),
  ...FILES.map((f) => newest(join(root, f))),
  ...COPIED.map((d) => newestCopied(join(root, d))),
);
if (
  built === 0 ||
  changed > built ||
  !existsSync(join(root, 'dist', 'workflow-bundle.js')) ||
  !existsSync(join(root, 'dist', 'workflow-bundle-plain.js'))
) {
  process.stderr.write('building (sources changed since the last build)\n');
  execFileSync('npm', ['run', '-s', 'build'], { cwd: root, stdio: 'inherit' });
  writeFileSync(stamp, new Date().toISOString());
}
