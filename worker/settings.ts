/** Configuration read once from the environment, shared by the worker and the command line. */
import { isAbsolute, join, relative, resolve } from 'node:path';
import type { TemporalSettings } from '../host/connection';

export const PROJECT_ROOT = resolve(__dirname, '..', '..');
export const DEFAULT_TASK_QUEUE = 'coding-agent';

export interface Settings {
  taskQueue: string;
  stateDir: string;
  /** The operator's model endpoints (`AGENT_PROVIDERS_FILE`, default `<state>/providers.json`). */
  providersFile: string;
  /** Ports of the embedded dev server and its Web UI. */
  devServerPort: number;
  devUiPort: number;
  /** Folders whose replays the operator trusts without --trust-replay (the project's own fixtures). */
  trustedReplayDirs: string[];
  /**
   * How to reach Temporal, as the `temporal` CLI reads it: TEMPORAL_PROFILE, TEMPORAL_CONFIG_FILE
   * (default `$XDG_CONFIG_HOME/temporalio/temporal.toml`, else `~/.config/temporalio/temporal.toml`),
   * TEMPORAL_API_KEY (never printed), TEMPORAL_TLS*, TEMPORAL_GRPC_META_* (host/connection.ts).
   */
  temporal: TemporalSettings;
}

export function readSettings(env: NodeJS.ProcessEnv = process.env): Settings {
  const stateDir = resolve(env.AGENT_STATE_DIR || resolve(PROJECT_ROOT, '.agent-state'));
  return {
    taskQueue: env.AGENT_TASK_QUEUE || DEFAULT_TASK_QUEUE,
    stateDir,
    providersFile: resolve(env.AGENT_PROVIDERS_FILE || join(stateDir, 'providers.json')),
    devServerPort: Number(env.AGENT_DEV_SERVER_PORT || 7233),
    devUiPort: Number(env.AGENT_DEV_UI_PORT || 8233),
    trustedReplayDirs: (env.AGENT_TRUSTED_REPLAY_DIRS ?? resolve(PROJECT_ROOT, 'fixtures')).split(':').filter(Boolean).map((d) => resolve(d)),
    temporal: readTemporalSettings(env),
  };
}

const given = (value: string | undefined): string | null => (value === undefined || value === '' ? null : value);

/** The `temporal` CLI's connection variables (host/connection.ts resolves them with the config file). */
export function readTemporalSettings(env: NodeJS.ProcessEnv): TemporalSettings {
  const family = (prefix: string) => Object.fromEntries(Object.entries(env).filter((e): e is [string, string] => e[0].startsWith(prefix) && e[1] !== undefined));
  const explicit = given(env.TEMPORAL_CONFIG_FILE);
  const configDir = given(env.XDG_CONFIG_HOME) !== null && isAbsolute(env.XDG_CONFIG_HOME!) ? env.XDG_CONFIG_HOME! : given(env.HOME) !== null ? join(env.HOME!, '.config') : null;
  return {
    address: given(env.TEMPORAL_ADDRESS),
    namespace: given(env.TEMPORAL_NAMESPACE),
    profile: given(env.TEMPORAL_PROFILE),
    configFile: explicit !== null ? { path: resolve(explicit), explicit: true } : configDir !== null ? { path: join(configDir, 'temporalio', 'temporal.toml'), explicit: false } : null,
    apiKey: given(env.TEMPORAL_API_KEY),
    // TEMPORAL_TLS and TEMPORAL_TLS_*: an empty value is unset, as for the other variables.
    tls: Object.fromEntries(Object.entries(family('TEMPORAL_TLS')).filter(([name, v]) => (name === 'TEMPORAL_TLS' || name.startsWith('TEMPORAL_TLS_')) && v !== '')),
    // An empty TEMPORAL_GRPC_META_X removes header x that the profile sets.
    grpcMeta: family('TEMPORAL_GRPC_META_'),
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
