/**
 * The project's own tools environment (scripts/install-tools.sh): a virtual environment with the
 * pinned Temporal CLI and pytest, default `.agent-state/tools` in the repository, or
 * `AGENT_TOOLS_DIR`. Fixed per checkout, not per state folder, so every run and test finds it.
 */
import { existsSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import type { Settings } from './settings';

type ToolSettings = Pick<Settings, 'toolsDir' | 'path'>;

export function toolsBinDir(settings: Pick<Settings, 'toolsDir'>): string {
  return join(settings.toolsDir, 'bin');
}

/** PATH for processes the harness runs on the host: the tools environment first, when it exists. */
export function hostPath(settings: ToolSettings): string {
  const bin = toolsBinDir(settings);
  return existsSync(bin) ? `${bin}${delimiter}${settings.path}` : settings.path;
}
