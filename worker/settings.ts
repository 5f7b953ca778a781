/** Configuration read once from the environment, shared by the worker and the command line. */
import { isAbsolute, join, relative, resolve } from 'node:path';

export const PROJECT_ROOT = resolve(__dirname, '..', '..');
export const DEFAULT_TASK_QUEUE = 'coding-agent';

export interface Settings {
  /** Set: connect to this cluster and expect workers there. Unset: the embedded dev server. */
  temporalAddress: string | null;
  namespace: string;
  taskQueue: string;
  stateDir: string;
  /** The operator's model endpoints (`AGENT_PROVIDERS_FILE`, default `<state>/providers.json`). */
  providersFile: string;
  /** Ports of the embedded dev server and its Web UI. */
  devServerPort: number;
  devUiPort: number;
  /** Folders whose replays the operator trusts without --trust-replay (the project's own fixtures). */
  trustedReplayDirs: string[];
}

export function readSettings(env: NodeJS.ProcessEnv = process.env): Settings {
  const stateDir = resolve(env.AGENT_STATE_DIR || resolve(PROJECT_ROOT, '.agent-state'));
  return {
    temporalAddress: env.TEMPORAL_ADDRESS || null,
    namespace: env.TEMPORAL_NAMESPACE || 'default',
    taskQueue: env.AGENT_TASK_QUEUE || DEFAULT_TASK_QUEUE,
    stateDir,
    providersFile: resolve(env.AGENT_PROVIDERS_FILE || join(stateDir, 'providers.json')),
    devServerPort: Number(env.AGENT_DEV_SERVER_PORT || 7233),
    devUiPort: Number(env.AGENT_DEV_UI_PORT || 8233),
    trustedReplayDirs: (env.AGENT_TRUSTED_REPLAY_DIRS ?? resolve(PROJECT_ROOT, 'fixtures')).split(':').filter(Boolean).map((d) => resolve(d)),
  };
}

/** A replay is trusted when the operator says so, or when it lies in a folder the operator trusts. */
export function replayTrusted(settings: Settings, replayPath: string, flag: boolean): boolean {
  if (flag) return true;
  return settings.trustedReplayDirs.some((dir) => {
    const rel = relative(dir, resolve(replayPath));
    return rel !== '' && !rel.startsWith('..') && !isAbsolute(rel);
  });
}
