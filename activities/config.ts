import type { Budgets } from '../core/contracts';

/** Host-side settings of the harness. Limits have safe defaults and can be lowered for tests. */
export interface Limits {
  /** Largest file read_file, search or apply_patch will open. */
  maxFileBytes: number;
  /** Cap on the text one read_file returns. */
  readBytes: number;
  /** Cap on the serialised matches one search returns. */
  searchBytes: number;
  /** Cap on a unified diff (show_diff, and each pending approval's diff). */
  diffBytes: number;
  /**
   * Largest whole diff the host store keeps for an action whose diff was cut at `diffBytes`, so
   * the console can show it whole before Approve (a larger one is approved from the command line).
   */
  wholeDiffBytes: number;
  /** Cap on the `new` text of one apply_patch. */
  patchBytes: number;
  /** Bytes kept of each of stdout and stderr of a test or acceptance process. */
  execOutputBytes: number;
  /** Bytes of output shown in run_tests' output_tail. */
  outputTailBytes: number;
  /** Largest JUnit report accepted; a larger one counts as unusable output. */
  reportBytes: number;
}

export const DEFAULT_LIMITS: Limits = {
  maxFileBytes: 1024 * 1024,
  readBytes: 64 * 1024,
  searchBytes: 32 * 1024,
  diffBytes: 32 * 1024,
  wholeDiffBytes: 8 * 1024 * 1024,
  patchBytes: 256 * 1024,
  execOutputBytes: 1024 * 1024,
  outputTailBytes: 4 * 1024,
  reportBytes: 8 * 1024 * 1024,
};

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
