#!/usr/bin/env node
// Copies the build's non-TypeScript sources next to their compiled modules in dist/, which read
// them relative to themselves: the isolation probes (sandbox/probe/probe.py and probe.sh) and
// the prompt versions (prompts/, read from dist/prompts by default). Part of `npm run build`, after
// tsc; and removes compiled modules whose source is gone. Plain JavaScript, like build-if-stale.js.
'use strict';
const { copyFileSync, cpSync, existsSync, mkdirSync, readdirSync, rmSync } = require('node:fs');
const { dirname, join } = require('node:path');

const root = join(__dirname, '..');
const ASSETS = ['sandbox/probe/probe.py', 'sandbox/probe/probe.sh'];
/** Folders copied whole (a version removed from the source is removed from the build too). */
const FOLDERS = ['prompts'];

for (const asset of ASSETS) {
  const target = join(root, 'dist', asset);
  mkdirSync(dirname(target), { recursive: true });
  copyFileSync(join(root, asset), target);
}

for (const folder of FOLDERS) {
  const target = join(root, 'dist', folder);
  rmSync(target, { recursive: true, force: true });
  cpSync(join(root, folder), target, { recursive: true });
}

// A compiled module whose source is gone (moved or removed) would still run: a stale test suite
// would still be found by jest, a stale module still be required. Each is removed with its map.
/** The source folders: the ones tsconfig.json compiles. */
const SOURCE_FOLDERS = require('../tsconfig.json').include;
function prune(rel) {
  const dir = join(root, 'dist', rel);
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(rel, entry.name);
    if (entry.isDirectory()) {
      prune(path);
      if (readdirSync(join(dir, entry.name)).length === 0) rmSync(join(dir, entry.name), { recursive: true });
    } else if (entry.name.endsWith('.js') && !existsSync(join(root, path.replace(/\.js$/, '.ts')))) {
      rmSync(join(root, 'dist', path));
      rmSync(join(root, 'dist', `${path}.map`), { force: true });
    }
  }
}
for (const folder of SOURCE_FOLDERS) if (existsSync(join(root, 'dist', folder))) prune(folder);
