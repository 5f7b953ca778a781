// The house's arrows as two lint rules (docs/architecture.md): which top-level folder may import
// which, and no import circle between files. Plain JavaScript, loaded by eslint.config.js.
'use strict';
const { existsSync, readFileSync, statSync } = require('node:fs');
const { dirname, join, relative, resolve, sep } = require('node:path');

/** Each folder and the folders it may import (its own always). Folders not listed (tests/) may import any. */
const ARROWS = {
  core: [],
  host: ['core'],
  store: ['core', 'host'],
  workspace: ['core', 'host', 'store'],
  sandbox: ['core', 'host', 'workspace'],
  tools: ['core', 'host', 'store', 'workspace', 'sandbox'],
  models: ['core', 'host', 'store'],
  activities: ['core', 'host', 'store', 'workspace', 'sandbox', 'tools', 'models'],
  workflows: ['core'],
  worker: ['core', 'host', 'store', 'sandbox', 'models', 'activities', 'workflows'],
  client: ['core', 'host', 'store', 'workspace', 'sandbox', 'workflows'],
  scripts: ['core', 'host', 'store', 'workspace', 'sandbox', 'tools', 'models', 'activities', 'workflows', 'worker', 'client'],
};

/** Where each folder's job is, for the message that says where an import should go. */
const JOBS = {
  core: 'pure contracts and rules',
  host: 'this machine: settings, operator files, processes, the Temporal server and connection, telemetry',
  store: "the host's durable record: the store, the ledger, fragments and stored traces",
  workspace: "a run's files: preparing, reading, writing, undoing, forking and the verified change",
  sandbox: 'where commands run and what keeps them in',
  tools: 'what each tool does to a workspace',
  models: 'providers, prompts and decisions',
  activities: 'Temporal adapters over the folders below',
  workflows: 'deterministic workflow code',
  worker: 'the worker process',
  client: 'the command line and the console',
  scripts: 'entry points of scripts',
  tests: 'the test suites',
};

/** The house's root: the folder of eslint.config.js. */
const ROOT = resolve(__dirname, '..');

function topFolder(root, file) {
  const rel = relative(root, file);
  return rel.startsWith('..') ? null : rel.split(sep)[0];
}

/** A relative specifier resolved to a source file of the house, or null (a package, an asset, a missing file). */
function resolveImport(from, spec) {
  if (!spec.startsWith('.')) return null;
  const base = resolve(dirname(from), spec);
  for (const candidate of [`${base}.ts`, join(base, 'index.ts'), base]) {
    if (candidate.endsWith('.ts') && existsSync(candidate) && statSync(candidate).isFile()) return candidate;
  }
  return null;
}

/** Every relative specifier a file imports, re-exports or loads with import()/require(). */
function specifiers(text) {
  const found = [];
  const pattern = /(?:\bfrom\s+|\bimport\s*\(\s*|\brequire\s*\(\s*|^\s*import\s+)(['"])(\.{1,2}\/[^'"]*)\1/gm;
  for (let m = pattern.exec(text); m !== null; m = pattern.exec(text)) found.push(m[2]);
  return found;
}

/** The files reachable from `start` by imports, each with the files it imports (read once per lint run). */
const graphs = new Map();
function edgesOf(file) {
  let edges = graphs.get(file);
  if (edges === undefined) {
    let text = '';
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      // a file that vanished mid-lint has no edges
    }
    edges = specifiers(text)
      .map((s) => resolveImport(file, s))
      .filter((f) => f !== null);
    graphs.set(file, edges);
  }
  return edges;
}

/** A path of imports from `from` back to `to`, or null. */
function pathBack(from, to) {
  const seen = new Set([from]);
  const queue = [[from]];
  while (queue.length > 0) {
    const path = queue.shift();
    for (const next of edgesOf(path[path.length - 1])) {
      if (next === to) return [...path, next];
      if (!seen.has(next)) {
        seen.add(next);
        queue.push([...path, next]);
      }
    }
  }
  return null;
}

function importSources(node) {
  if (node.type === 'ImportExpression') return node.source;
  return node.source;
}

const arrows = {
  meta: { type: 'problem', schema: [{ type: 'object', properties: { root: { type: 'string' } }, additionalProperties: false }] },
  create(context) {
    const root = context.options[0]?.root ?? ROOT;
    const file = context.filename;
    const own = topFolder(root, file);
    if (own === null || !(own in ARROWS)) return {};
    const check = (node) => {
      const source = importSources(node);
      if (!source || source.type !== 'Literal' || typeof source.value !== 'string') return;
      const target = resolveImport(file, source.value);
      if (target === null) return;
      const folder = topFolder(root, target);
      if (folder === null || folder === own || ARROWS[own].includes(folder)) return;
      const may = ARROWS[own].length ? ARROWS[own].map((f) => `${f}/`).join(', ') : 'nothing of the house';
      context.report({
        node: source,
        message: `${own}/ (${JOBS[own]}) may import only ${may}: ${folder}/ (${JOBS[folder] ?? 'another folder'}) is not below it. Move what it needs down to a folder both may import, or pass it in from above (docs/architecture.md).`,
      });
    };
    return { ImportDeclaration: check, ExportNamedDeclaration: check, ExportAllDeclaration: check, ImportExpression: check };
  },
};

const noCycle = {
  meta: { type: 'problem', schema: [] },
  create(context) {
    const file = context.filename;
    const check = (node) => {
      const source = importSources(node);
      if (!source || source.type !== 'Literal' || typeof source.value !== 'string') return;
      const target = resolveImport(file, source.value);
      if (target === null) return;
      const back = target === file ? [file] : pathBack(target, file);
      if (back === null) return;
      const names = [file, ...back].map((f) => relative(ROOT, f)).join(' -> ');
      context.report({
        node: source,
        message: `import circle: ${names}. Move what both need into a file both import (a type into core/ or a file of its own).`,
      });
    };
    return { ImportDeclaration: check, ExportNamedDeclaration: check, ExportAllDeclaration: check, ImportExpression: check };
  },
};

module.exports = { ARROWS, JOBS, plugin: { rules: { arrows, 'no-cycle': noCycle } } };
