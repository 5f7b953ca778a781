import type { Budgets } from '../core/contracts';
import type { Limits } from '../core/limits';

export { DEFAULT_LIMITS, type Limits } from '../core/limits';

export interface HarnessConfig {
  /** Project state folder: run workspaces, control folders and the ledger live below it. */
  stateDir: string;
  limits: Limits;
  /** The largest budgets any run on this worker gets (the settings' `AGENT_MAX_BUDGETS`). */
  maxBudgets: Partial<Budgets>;
  /** Model prices in US dollars per million tokens (the settings' prices file); a model not listed costs null. */
  prices?: Record<string, { input: number; output: number; cached_input?: number; cache_write_input?: number }>;
  /** The operator's providers file (`AGENT_PROVIDERS_FILE`, default `<state>/providers.json`). */
  providersFile: string;
  /** The operator's setup credentials (`AGENT_CREDENTIALS_FILE`, default `<state>/credentials.json`). */
  credentialsFile: string;
  /** The prompt versions a live source may use (`AGENT_PROMPTS_DIR`, default the build's `prompts/`). */
  promptsDir: string;
  /** Timeout of one provider HTTP request (default 120 s). */
  modelTimeoutMs?: number;
  /**
   * This host's own task queue. A run's workspace, control folder, ledger rows and stored
   * transcript live on the host that loaded it, so every later activity of the run goes here.
   */
  hostQueue?: string;
  /** This worker exports traces (OTEL_EXPORTER_OTLP_ENDPOINT is set): a run it loads records its trace id. */
  traces?: boolean;
  /** Where an endpoint of each kind without its own `base_url` sends requests (the worker's settings). */
  baseUrls: Record<'openai' | 'anthropic', string>;
  /**
   * The value of the worker's variable `name` (an endpoint's `api_key_env`, a setup credential's
   * `env`), read at each call (host/settings.ts readCredential); undefined when it is not set.
   */
  credential: (name: string) => string | undefined;
}
