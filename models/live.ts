/**
 * `decide` for a live provider. The request is rebuilt from the run's authoritative facts and the
 * stored transcript; it is identified by a digest of (provider, model, run, turn, retry, body).
 * The reply streams: its text goes to the host store as fragments while it arrives, and the whole
 * raw response, put back together from the stream, is stored under that digest before the
 * activity returns, so an activity that Temporal retries after the provider answered (a worker
 * killed at the wrong moment) finds the answer in the store and does not pay for it again.
 *
 * Paid once, exactly: a reply that was stored is never asked for again. A reply whose stream never
 * ended (the worker killed mid-stream, the connection cut, a stall) was not stored: the retried
 * activity sends the same request again, and only that second, whole reply is stored, counted
 * (`model_calls`, tokens) and priced. The provider may still bill what it generated for the
 * abandoned stream; its usage never arrived (it comes at a stream's end), so no record shows it.
 */
import { CancelledFailure } from '@temporalio/common';
import { BUDGET_DEFAULTS } from '../core/budgets';
import { systemText } from '../core/prompt';
import { buildContext, estimateTokens, type ContextCall, type ContextGroup, type RunFacts } from '../core/context';
import type { Decision, Endpoint, ToolResult, Usage } from '../core/contracts';
import type { TranscriptEntry } from '../core/transcript';
import { digestJson } from '../host/digest';
import { nonRetryable } from '../core/failures';
import { faultPoint } from '../host/faults';
import { anthropicAdapter } from './anthropic';
import { classify } from './errors';
import { FragmentWriter } from '../store/fragments';
import { openaiAdapter } from './openai';
import { scrubbedError, scrubSecret } from '../core/secrets';
import type { Prompt } from './tool-schemas';
import type { ProviderAdapter, ReplyDecision } from './types';
import type { Store } from '../store/store';
import type { DecideInput, DecideResult, SourceRef } from '../core/activities';

export const DEFAULT_CONTEXT_BUDGET_TOKENS = BUDGET_DEFAULTS.context_budget_tokens;
export const DEFAULT_MAX_OUTPUT_TOKENS = BUDGET_DEFAULTS.max_output_tokens;

/** Prices in US dollars per million tokens, by model name. */
export type PriceTable = Record<string, { input: number; output: number; cached_input?: number; cache_write_input?: number }>;

export interface LiveContext {
  store: Store;
  prices: PriceTable;
  /** Timeout of one HTTP request until its response begins, and the longest silence of its stream after. */
  timeoutMs: number;
  signal: AbortSignal;
  heartbeat: () => void;
  /** The worker's key variable of that name, read at each call (never kept). */
  credential: (name: string) => string | undefined;
  /** Where an endpoint without `base_url` sends requests, by kind (the worker's settings). */
  baseUrls: Record<Endpoint['kind'], string>;
  /** The operator's endpoint the run named, looked up for this call. */
  endpoint: Endpoint;
  /** The run's prompt version: the system prompt and the tool texts every request is built with. */
  prompt: Prompt;
}

const ADAPTERS: Record<'openai' | 'anthropic', ProviderAdapter> = { openai: openaiAdapter, anthropic: anthropicAdapter };

export function adapterFor(kind: Endpoint['kind']): ProviderAdapter {
  return ADAPTERS[kind];
}

/** The stored transcript as conversation groups: each model reply's calls with their results. */
export function transcriptGroups(store: Store, entries: TranscriptEntry[]): ContextGroup[] {
  const groups: ContextGroup[] = [];
  let current: { reply: string | null; group: Extract<ContextGroup, { kind: 'reply' }> } | null = null;
  for (const entry of entries) {
    if ('message' in entry) {
      groups.push({ kind: 'message', text: entry.message, ...(entry.pinned ? { pinned: true as const } : {}) });
      current = null;
      continue;
    }
    const decision = store.get<Decision>(entry.decision);
    if (decision.kind === 'model_error') continue;
    const reply = entry.reply ?? null;
    if (current === null || reply === null || current.reply !== reply) {
      current = { reply, group: { kind: 'reply', text: null, calls: [] } };
      groups.push(current.group);
    }
    const group = current.group;
    if (decision.kind === 'tool') {
      const call = (decision.call ?? {}) as { call_id?: unknown; name?: unknown; arguments?: unknown };
      const result = entry.result !== undefined ? store.get<ToolResult>(entry.result) : null;
      // A call without its result cannot go to a provider; the workflow never leaves one behind.
      if (result === null) throw nonRetryable('ProtocolError', `transcript call ${String(call.call_id)} has no result`);
      const c: ContextCall = {
        id: String(call.call_id ?? result.call_id),
        name: String(call.name ?? ''),
        arguments: call.arguments ?? {},
        result,
      };
      group.calls.push(c);
    } else {
      group.text = group.text ? `${group.text}\n${decision.text}` : decision.text;
    }
  }
  return groups;
}

/**
 * The price of one call: input read from the cache at `cached_input`, input written to it at
 * `cache_write_input` (each at `input` when not given), the rest of the input at `input`.
 */
function cost(prices: PriceTable, model: string, usage: Usage, cacheWriteTokens: number): number | null {
  const p = prices[model];
  if (!p) return null;
  const fresh = Math.max(0, usage.input_tokens - usage.cached_tokens - cacheWriteTokens);
  return (
    (fresh * p.input +
      usage.cached_tokens * (p.cached_input ?? p.input) +
      cacheWriteTokens * (p.cache_write_input ?? p.input) +
      usage.output_tokens * p.output) /
    1_000_000
  );
}

/**
 * The most one request can cost, before it is sent: its body's characters at one token per three
 * (tokenizers average three to four characters a token for English, code and JSON), each at the
 * model's highest input price (fresh, cached or written to the cache), and the reply's limit
 * (`max_output_tokens`) at the output price. Null when the model has no price.
 */
export function requestCostBound(prices: PriceTable, model: string, body: unknown, maxOutputTokens: number): number | null {
  const p = prices[model];
  if (!p) return null;
  const inputTokens = Math.ceil(JSON.stringify(body).length / 3);
  const inputPrice = Math.max(p.input, p.cached_input ?? p.input, p.cache_write_input ?? p.input);
  return (inputTokens * inputPrice + maxOutputTokens * p.output) / 1_000_000;
}

export async function liveDecide(
  ctx: LiveContext,
  input: DecideInput & { source: Extract<SourceRef, { kind: 'provider' }> },
  head: string | null,
  toView: (decisions: ReplyDecision[], reply: string) => DecideResult & { kind: 'decisions' },
): Promise<DecideResult> {
  const { store } = ctx;
  const source = input.source;
  const facts: RunFacts = input.facts!;
  const { endpoint } = ctx;
  const adapter = adapterFor(endpoint.kind);
  const budget = facts.budgets.context_budget_tokens ?? DEFAULT_CONTEXT_BUDGET_TOKENS;
  const maxOutput = facts.budgets.max_output_tokens ?? DEFAULT_MAX_OUTPUT_TOKENS;
  const groups = transcriptGroups(store, store.transcript(head));
  const orchestrating = facts.orchestrating === true;
  const room = (factor: number) => Math.floor((budget - estimateTokens(adapter.tools(ctx.prompt, orchestrating)) - maxOutput) * factor);

  // Read only here, inside the activity; never returned, logged or stored.
  const apiKey = ctx.credential(endpoint.api_key_env);
  if (!apiKey) {
    throw nonRetryable(
      'ProviderUnavailable',
      `the environment variable ${endpoint.api_key_env} of endpoint ${endpoint.name} is not set on the worker`,
    );
  }

  // A repository run's instructions join the system prompt; the room for the context shrinks by what they take.
  const system = systemText(ctx.prompt.texts, facts.instructions ? store.get<{ text: string }>(facts.instructions).text : null);
  const instructionTokens = estimateTokens(system) - estimateTokens(ctx.prompt.texts.system);
  let compacted = false;
  for (let factor = 1; ; factor /= 2) {
    const context = buildContext(facts, groups, room(factor) - instructionTokens);
    const body = adapter.body(source.model, ctx.prompt, system, context, maxOutput, orchestrating);
    const request = digestJson({
      provider: source.provider,
      model: source.model,
      run_id: input.run_id,
      turn: input.turn,
      retry: input.retry,
      body,
    });
    let stored = store.modelResponse(request);
    const fromStore = stored !== null;
    if (stored === null && input.cost_room_usd !== undefined) {
      // A request already answered (a retried activity) costs nothing more; a new one must fit the budget.
      const bound = requestCostBound(ctx.prices, source.model, body, maxOutput);
      if (bound === null) throw nonRetryable('InfrastructureError', `model ${source.model} has no price in the worker's prices file`);
      if (bound > input.cost_room_usd)
        return { kind: 'over_budget', estimate_usd: bound, room_usd: input.cost_room_usd, head, usage: null };
    }
    if (stored === null) {
      store.put('model_request', body);
      const sent = await send(ctx, adapter, body, apiKey, new FragmentWriter(store, input.run_id, input.turn));
      if ('failure' in sent) {
        if (sent.failure.context_overflow && !compacted) {
          compacted = true;
          continue; // compact to half the room and try once more
        }
        const { transient, retry_after_ms, detail } = sent.failure;
        return {
          kind: 'model_error',
          transient,
          cut_off: false,
          retry_after_ms,
          detail,
          ref: null,
          cursor: input.cursor,
          head,
          usage: null,
        };
      }
      // Stored before anything else happens: from here on, a retry of this activity is free.
      stored = { digest: store.recordModelResponse(request, sent.raw), raw: sent.raw };
      faultPoint('after_model_response');
    }
    const how = { model: source.model, compacted, from_store: fromStore };
    return answer(ctx, adapter.parse(stored.raw), { ...how, head, cursor: input.cursor, digest: stored.digest, apiKey }, toView);
  }
}

/**
 * One request to the provider, heartbeating while it is out, its text written as fragments as it
 * streams; a provider's failure classified and scrubbed of the key (its text goes to history, the
 * trace and reports), anything else thrown.
 */
async function send(
  ctx: LiveContext,
  adapter: ProviderAdapter,
  body: Record<string, unknown>,
  apiKey: string,
  fragments: FragmentWriter,
): Promise<{ raw: unknown } | { failure: NonNullable<ReturnType<typeof classify>> }> {
  const { endpoint, signal } = ctx;
  const beat = setInterval(ctx.heartbeat, 1000);
  try {
    ctx.heartbeat();
    return {
      raw: await adapter.send(body, {
        apiKey,
        baseURL: endpoint.base_url ?? ctx.baseUrls[endpoint.kind],
        timeoutMs: ctx.timeoutMs,
        signal,
        onText: fragments.push,
      }),
    };
  } catch (err) {
    if (signal.aborted) throw new CancelledFailure('the model request was cancelled');
    const failure = classify(err);
    if (failure === null) throw scrubbedError(err, apiKey);
    failure.detail = scrubSecret(failure.detail, apiKey);
    return { failure };
  } finally {
    clearInterval(beat);
    // Before the response is stored: a reader sees every kept fragment of a turn before its end.
    fragments.flush();
  }
}

/** What a stored reply means for the run: decisions, a refusal, or a reply cut off by the output limit. */
function answer(
  ctx: LiveContext,
  reply: ReturnType<ProviderAdapter['parse']>,
  o: { model: string; compacted: boolean; from_store: boolean; head: string | null; cursor: number; digest: string; apiKey: string },
  toView: (decisions: ReplyDecision[], reply: string) => DecideResult & { kind: 'decisions' },
): DecideResult {
  const { head, cursor } = o;
  const usage: Usage = { ...reply.usage, cost_usd: cost(ctx.prices, o.model, reply.usage, reply.cache_write_tokens) };
  const how = {
    compacted: o.compacted,
    from_store: o.from_store,
    cache: { hit: reply.usage.cached_tokens > 0, write_tokens: reply.cache_write_tokens },
  };
  switch (reply.kind) {
    case 'refused':
      return { kind: 'refused', detail: scrubSecret(reply.detail, o.apiKey), head, usage, ...how };
    case 'truncated': {
      const detail = 'the reply was cut off by the output limit; none of its calls ran';
      return { kind: 'model_error', transient: true, cut_off: true, retry_after_ms: null, detail, ref: null, cursor, head, usage, ...how };
    }
    case 'decisions':
      return { ...toView(reply.decisions, o.digest), usage, ...how };
  }
}
