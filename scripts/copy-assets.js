#!/usr/bin/env node
// Copies the build's non-TypeScript sources next to their compiled modules in dist/, which read
// them relative to themselves: the isolation probe (activities/backends/probe.py). Part of
// `npm run build`, after tsc. Plain JavaScript, like build-if-stale.js.
'use strict';
const { copyFileSync, mkdirSync } = require('node:fs');
const { dirname, join } = require('node:path');

const root = join(__dirname, '..');
const ASSETS = ['activities/backends/probe.py'];

for (const asset of ASSETS) {
  const target = join(root, 'dist', asset);
  mkdirSync(dirname(target), { recursive: true });
  copyFileSync(join(root, asset), target);
}
