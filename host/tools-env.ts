/**
 * The project's own tools environment (scripts/install-tools.sh): a virtual environment with the
 * pinned Temporal CLI and pytest, default `.agent-state/tools` in the repository, or
 * `AGENT_TOOLS_DIR`. Fixed per checkout, not per state folder, so every run and test finds it.
 */
import { existsSync } from 'node:fs';
import { delimiter, join, resolve } from 'node:path';

const PROJECT_ROOT = resolve(__dirname, '..', '..');

export function toolsBinDir(env: NodeJS.ProcessEnv = process.env): string {
  return join(env.AGENT_TOOLS_DIR || join(PROJECT_ROOT, '.agent-state', 'tools'), 'bin');
}

/** PATH for processes the harness runs on the host: the tools environment first, when it exists. */
export function hostPath(env: NodeJS.ProcessEnv = process.env): string {
  const path = env.PATH ?? '/usr/local/bin:/usr/bin:/bin';
  const bin = toolsBinDir(env);
  return existsSync(bin) ? `${bin}${delimiter}${path}` : path;
}
