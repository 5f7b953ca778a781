/** OpenAI Chat Completions, and every server that speaks it (chosen by `baseURL`). */
import OpenAI from 'openai';
import type { BuiltContext, ContextGroup } from '../core/context';
import { ChatAssembly, type ChatChunk } from './openai-stream';
import { singleCredentialFetch } from './secrets';
import { streamedReply, type ProviderStream } from './stream';
import { dropNulls, openaiTools, type Prompt } from './tool-schemas';
import { sha256 } from '../host/digest';
import type { Usage } from '../core/contracts';
import type { ParsedReply, ProviderAdapter, ReplyDecision, SendOptions } from './types';

function messages(system: string, context: BuiltContext): unknown[] {
  const out: unknown[] = [
    { role: 'system', content: system },
    { role: 'user', content: context.summary },
  ];
  const group = (g: ContextGroup) => {
    if (g.kind === 'message') return void out.push({ role: 'user', content: g.text });
    if (g.calls.length === 0) return void out.push({ role: 'assistant', content: g.text ?? '' });
    out.push({
      role: 'assistant',
      content: g.text,
      tool_calls: g.calls.map((c) => ({
        id: c.id,
        type: 'function',
        function: { name: c.name, arguments: typeof c.arguments === 'string' ? c.arguments : JSON.stringify(c.arguments) },
      })),
    });
    for (const c of g.calls) out.push({ role: 'tool', tool_call_id: c.id, content: JSON.stringify(c.result) });
  };
  context.groups.forEach(group);
  return out;
}

function usageOf(raw: {
  usage?: { prompt_tokens?: number; completion_tokens?: number; prompt_tokens_details?: { cached_tokens?: number } };
}): Usage {
  return {
    model_calls: 1,
    cost_usd: null,
    input_tokens: raw.usage?.prompt_tokens ?? 0,
    output_tokens: raw.usage?.completion_tokens ?? 0,
    cached_tokens: raw.usage?.prompt_tokens_details?.cached_tokens ?? 0,
  };
}

function parseArguments(text: string): unknown {
  try {
    return dropNulls(JSON.parse(text));
  } catch {
    return text; // not JSON: validation answers with invalid_fields
  }
}

/**
 * Chat Completions caches the longest prefix a request shares with recent ones by itself; the key
 * routes requests that share one to the same cache. It names that prefix: the system prompt (with
 * a repository's instructions), the prompt version's tool texts, the tool set and the task with
 * its rules, which the first user message starts with (the run state follows them), so every
 * request of a run and every run of the same task share it.
 */
function cacheKey(prompt: Prompt, system: string, context: BuiltContext, orchestrating: boolean): string {
  return `coding-agent:${prompt.ref.version}:${sha256(`${prompt.ref.digest}\0${orchestrating}\0${system}\0${context.stable}`).slice(0, 24)}`;
}

export const openaiAdapter: ProviderAdapter = {
  name: 'openai',
  tools: openaiTools,
  body(model, prompt, system, context, maxOutputTokens, orchestrating = false) {
    return {
      model,
      messages: messages(system, context),
      tools: openaiTools(prompt, orchestrating),
      tool_choice: 'auto',
      max_tokens: maxOutputTokens,
      prompt_cache_key: cacheKey(prompt, system, context, orchestrating),
    };
  },
  async send(body, options: SendOptions) {
    // Every value the SDK would take from the environment is given here instead (null: none).
    const client = new OpenAI({
      apiKey: options.apiKey,
      adminAPIKey: null,
      organization: null,
      project: null,
      webhookSecret: null,
      baseURL: options.baseURL,
      maxRetries: 0,
      timeout: options.timeoutMs,
      fetch: singleCredentialFetch(options.apiKey),
    });
    // Usage comes in the stream's last chunk only when asked for.
    const stream = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } } as never, {
      signal: options.signal,
    });
    return streamedReply(stream as unknown as ProviderStream<ChatChunk>, new ChatAssembly(), options);
  },
  parse(raw): ParsedReply {
    const r = raw as {
      choices?: {
        finish_reason?: string;
        message?: {
          content?: string | null;
          refusal?: string | null;
          tool_calls?: { id: string; function?: { name?: string; arguments?: string } }[];
        };
      }[];
    };
    const usage = usageOf(raw as never);
    // Chat Completions reports cache reads only: writing the cache costs nothing extra there.
    const cache_write_tokens = 0;
    const choice = r.choices?.[0];
    const message = choice?.message ?? {};
    if (message.refusal) return { kind: 'refused', detail: `refusal: ${message.refusal.slice(0, 500)}`, usage, cache_write_tokens };
    if (choice?.finish_reason === 'content_filter') return { kind: 'refused', detail: 'content_filter', usage, cache_write_tokens };
    if (choice?.finish_reason === 'length') return { kind: 'truncated', usage, cache_write_tokens };
    const text = typeof message.content === 'string' && message.content !== '' ? message.content : null;
    const calls = message.tool_calls ?? [];
    if (calls.length === 0) return { kind: 'decisions', decisions: [{ kind: 'final', text: text ?? '' }], usage, cache_write_tokens };
    const decisions: ReplyDecision[] = text ? [{ kind: 'plan', text }] : [];
    for (const c of calls)
      decisions.push({
        kind: 'tool',
        call: { call_id: c.id, name: c.function?.name ?? '', arguments: parseArguments(c.function?.arguments ?? '') },
      });
    return { kind: 'decisions', decisions, usage, cache_write_tokens };
  },
};
