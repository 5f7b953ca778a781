#!/usr/bin/env node
// Copies the build's non-TypeScript sources next to their compiled modules in dist/, which read
// them relative to themselves: the isolation probes (sandbox/probe/probe.py and probe.sh) and
// the prompt versions (prompts/, read from dist/prompts by default). Part of `npm run build`, after
// tsc. Plain JavaScript, like build-if-stale.js.
'use strict';
const { copyFileSync, cpSync, mkdirSync, rmSync } = require('node:fs');
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
