/**
 * What a provider adapter does: turn the context into the exact request body of its API, send it
 * through the official SDK (its own retries off: the workflow's retry rule is the only one), and
 * turn the raw response into decisions. Errors are classified here, never by string matching on
 * free text alone.
 */
import type { BuiltContext } from '../core/context';
import type { Prompt } from './tool-schemas';
import type { Decision, Usage } from '../core/contracts';

/** What a model reply can decide: a provider failure is never a decision of the reply. */
export type ReplyDecision = Exclude<Decision, { kind: 'model_error' }>;

/**
 * A reply's `usage` is one model call (`model_calls: 1`), not priced yet (`cost_usd: null`; `decide`
 * prices it); `input_tokens` is all the input, of which `cached_tokens` were read from the
 * provider's prompt cache and `cache_write_tokens` written to it.
 */
export type ParsedReply = (
  | { kind: 'decisions'; decisions: ReplyDecision[] }
  /** Cut off by the output limit: no call of it may run. */
  | { kind: 'truncated' }
  | { kind: 'refused'; detail: string }
) & { usage: Usage; cache_write_tokens: number };

export interface SendOptions {
  apiKey: string;
  /** Always given (the endpoint's, else the worker's settings), so the SDK reads no base URL from the environment. */
  baseURL: string;
  /** Until the response's headers arrive, and then the longest silence of its stream. */
  timeoutMs: number;
  signal: AbortSignal;
  /** The reply's text as it streams, a piece at a time (joined, exactly the text `parse` reads). */
  onText?: (text: string) => void;
}

export interface ProviderAdapter {
  readonly name: 'openai' | 'anthropic';
  /** The tool definitions exactly as sent. */
  tools(prompt: Prompt, orchestrating?: boolean): unknown[];
  /**
   * The request body: the system prompt (the prompt version's, with a repository's instructions),
   * the tools with the version's texts, the context, the limits.
   */
  body(
    model: string,
    prompt: Prompt,
    system: string,
    context: BuiltContext,
    maxOutputTokens: number,
    orchestrating?: boolean,
  ): Record<string, unknown>;
  /**
   * Sends the body as a streaming request (the protocol's `stream` fields are added here, not in
   * `body`, whose digest names the request) and resolves to the raw JSON response put back
   * together from the stream, exactly as the same request without streaming answers it.
   */
  send(body: Record<string, unknown>, options: SendOptions): Promise<unknown>;
  parse(raw: unknown): ParsedReply;
}

/** A provider failure, classified: what the workflow does next depends only on these fields. */
export interface ProviderFailure {
  transient: boolean;
  /** From `retry-after-ms` / `retry-after`, capped at 60 s; null when not given. */
  retry_after_ms: number | null;
  /** The context did not fit the model's window: compact and try once more. */
  context_overflow: boolean;
  status: number | null;
  detail: string;
}

export const MAX_RETRY_AFTER_MS = 60_000;
