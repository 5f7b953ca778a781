// Lint rules that guard the hazards of this codebase: workflow code stays deterministic (no
// Node built-ins, no wall clock, no randomness), no promise floats unobserved anywhere, and the
// imports follow the house's arrows with no circle (scripts/eslint-house.js), and a client
// connection is made where it is safe to close.
'use strict';
const tseslint = require('typescript-eslint');
const { builtinModules } = require('node:module');
const house = require('./scripts/eslint-house');

const builtins = [...builtinModules, ...builtinModules.map((m) => `node:${m}`)];

/** Shared by the rules of workflow code and of core/ (a later block's rule replaces an earlier one's whole). */
const NO_WALL_CLOCK = {
  selector: "NewExpression[callee.name='Date'][arguments.length=0]",
  message: 'no wall-clock time in workflow code or core/',
};

module.exports = tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', '.agent-state/**', 'fixtures/**', '*.js', 'scripts/*.js'] },
  {
    files: ['**/*.ts'],
    languageOptions: {
      parser: tseslint.parser,
      parserOptions: { projectService: true, tsconfigRootDir: __dirname },
    },
    plugins: { '@typescript-eslint': tseslint.plugin, house: house.plugin },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: false }],
      // The house's arrows (docs/architecture.md): which folder may import which, and no import circle.
      'house/arrows': 'error',
      'house/no-cycle': 'error',
    },
  },
  {
    // A client connection of the SDK's gRPC transport is made in one place, whose retries are safe
    // to close under (host/connection.ts): the SDK's own retry threw from a timer once closed.
    files: ['**/*.ts'],
    ignores: ['host/connection.ts', 'scripts/support/temporal.ts'],
    rules: {
      'no-restricted-properties': [
        'error',
        ...['connect', 'lazy'].map((property) => ({ object: 'Connection', property, message: 'use connectClient (host/connection.ts)' })),
        ...['createFromExistingServer', 'createLocal', 'createTimeSkipping'].map((property) => ({
          object: 'TestWorkflowEnvironment',
          property,
          message: 'use testEnvironment (scripts/support/temporal.ts)',
        })),
      ],
    },
  },
  {
    files: ['workflows/**/*.ts', 'core/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        { paths: builtins.map((name) => ({ name, message: 'workflow code and core/ stay free of I/O: no Node built-ins' })) },
      ],
      'no-restricted-properties': [
        'error',
        { object: 'Date', property: 'now', message: 'workflow code reads time deterministically; core/ takes it as an argument' },
        { object: 'Math', property: 'random', message: 'no randomness in workflow code or core/' },
      ],
      'no-restricted-syntax': ['error', NO_WALL_CLOCK],
    },
  },
  {
    // One instance of each core/ module the workflows reach serves every workflow of a worker thread
    // (worker/index.ts, sharedWorkflowModules): state at its module scope would pass between runs.
    files: ['core/**/*.ts'],
    rules: {
      'no-restricted-syntax': [
        'error',
        NO_WALL_CLOCK,
        {
          selector: "Program > VariableDeclaration[kind!='const'], Program > ExportNamedDeclaration > VariableDeclaration[kind!='const']",
          message: 'core/ keeps no state at its module scope: its modules are shared by every workflow of a worker thread',
        },
      ],
    },
  },
);
