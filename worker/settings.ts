/** Configuration read once from the environment, shared by the worker and the command line. */
import { resolve } from 'node:path';

export const PROJECT_ROOT = resolve(__dirname, '..', '..');
export const DEFAULT_TASK_QUEUE = 'coding-agent';

export interface Settings {
  /** Set: connect to this cluster and expect workers there. Unset: the embedded dev server. */
  temporalAddress: string | null;
  namespace: string;
  taskQueue: string;
  stateDir: string;
}

export function readSettings(env: NodeJS.ProcessEnv = process.env): Settings {
  return {
    temporalAddress: env.TEMPORAL_ADDRESS || null,
    namespace: env.TEMPORAL_NAMESPACE || 'default',
    taskQueue: env.AGENT_TASK_QUEUE || DEFAULT_TASK_QUEUE,
    stateDir: resolve(env.AGENT_STATE_DIR || resolve(PROJECT_ROOT, '.agent-state')),
  };
}
