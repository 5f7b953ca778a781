/** OpenAI Chat Completions, and every server that speaks it (chosen by `baseURL`). */
import OpenAI from 'openai';
import type { BuiltContext, ContextGroup } from '../../core/context';
import { singleCredentialFetch } from './secrets';
import { dropNulls, openaiTools } from './tool-schemas';
import type { Usage } from '../../core/contracts';
import type { ParsedReply, ProviderAdapter, ReplyDecision, SendOptions } from './types';

function messages(system: string, context: BuiltContext): unknown[] {
  const out: unknown[] = [{ role: 'system', content: system }, { role: 'user', content: context.summary }];
  const group = (g: ContextGroup) => {
    if (g.kind === 'message') return void out.push({ role: 'user', content: g.text });
    if (g.calls.length === 0) return void out.push({ role: 'assistant', content: g.text ?? '' });
    out.push({
      role: 'assistant',
      content: g.text,
      tool_calls: g.calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: typeof c.arguments === 'string' ? c.arguments : JSON.stringify(c.arguments) } })),
    });
    for (const c of g.calls) out.push({ role: 'tool', tool_call_id: c.id, content: JSON.stringify(c.result) });
  };
  context.groups.forEach(group);
  return out;
}

function usageOf(raw: { usage?: { prompt_tokens?: number; completion_tokens?: number; prompt_tokens_details?: { cached_tokens?: number } } }): Usage {
  return { model_calls: 1, cost_usd: null, input_tokens: raw.usage?.prompt_tokens ?? 0, output_tokens: raw.usage?.completion_tokens ?? 0, cached_tokens: raw.usage?.prompt_tokens_details?.cached_tokens ?? 0 };
}

function parseArguments(text: string): unknown {
  try {
    return dropNulls(JSON.parse(text));
  } catch {
    return text; // not JSON: validation answers with invalid_fields
  }
}

export const openaiAdapter: ProviderAdapter = {
  name: 'openai',
  tools: openaiTools,
  body(model, prompt, context, maxOutputTokens, orchestrating = false) {
    return { model, messages: messages(prompt.texts.system, context), tools: openaiTools(prompt, orchestrating), tool_choice: 'auto', max_tokens: maxOutputTokens };
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
    return client.chat.completions.create(body as never, { signal: options.signal });
  },
  parse(raw): ParsedReply {
    const r = raw as { choices?: { finish_reason?: string; message?: { content?: string | null; refusal?: string | null; tool_calls?: { id: string; function?: { name?: string; arguments?: string } }[] } }[] };
    const usage = usageOf(raw as never);
    const choice = r.choices?.[0];
    const message = choice?.message ?? {};
    if (message.refusal) return { kind: 'refused', detail: `refusal: ${message.refusal.slice(0, 500)}`, usage };
    if (choice?.finish_reason === 'content_filter') return { kind: 'refused', detail: 'content_filter', usage };
    if (choice?.finish_reason === 'length') return { kind: 'truncated', usage };
    const text = typeof message.content === 'string' && message.content !== '' ? message.content : null;
    const calls = message.tool_calls ?? [];
    if (calls.length === 0) return { kind: 'decisions', decisions: [{ kind: 'final', text: text ?? '' }], usage };
    const decisions: ReplyDecision[] = text ? [{ kind: 'plan', text }] : [];
    for (const c of calls) decisions.push({ kind: 'tool', call: { call_id: c.id, name: c.function?.name ?? '', arguments: parseArguments(c.function?.arguments ?? '') } });
    return { kind: 'decisions', decisions, usage };
  },
};
