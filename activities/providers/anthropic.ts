/** Anthropic Messages: all results of one reply go back in one user message, in order. */
import Anthropic from '@anthropic-ai/sdk';
import type { BuiltContext } from '../../core/context';
import { singleCredentialFetch } from './secrets';
import { anthropicTools } from './tool-schemas';
import type { Usage } from '../../core/contracts';
import type { ParsedReply, ProviderAdapter, ReplyDecision, SendOptions } from './types';

type Block = Record<string, unknown>;

function messages(context: BuiltContext): { role: 'user' | 'assistant'; content: Block[] }[] {
  const out: { role: 'user' | 'assistant'; content: Block[] }[] = [{ role: 'user', content: [{ type: 'text', text: context.summary }] }];
  // Consecutive user content (tool results, then a person's message) shares one user message.
  const user = (blocks: Block[]) => {
    const last = out[out.length - 1];
    if (last.role === 'user') last.content.push(...blocks);
    else out.push({ role: 'user', content: blocks });
  };
  for (const g of context.groups) {
    if (g.kind === 'message') {
      user([{ type: 'text', text: g.text }]);
      continue;
    }
    const content: Block[] = g.text ? [{ type: 'text', text: g.text }] : [];
    for (const c of g.calls) content.push({ type: 'tool_use', id: c.id, name: c.name, input: c.arguments !== null && typeof c.arguments === 'object' ? c.arguments : { value: c.arguments } });
    if (content.length === 0) content.push({ type: 'text', text: '(empty reply)' });
    out.push({ role: 'assistant', content });
    if (g.calls.length > 0) user(g.calls.map((c) => ({ type: 'tool_result', tool_use_id: c.id, content: JSON.stringify(c.result), ...(c.result.ok ? {} : { is_error: true }) })));
  }
  return out;
}

function usageOf(raw: { usage?: { input_tokens?: number; output_tokens?: number; cache_read_input_tokens?: number | null } }): Usage {
  return { model_calls: 1, cost_usd: null, input_tokens: raw.usage?.input_tokens ?? 0, output_tokens: raw.usage?.output_tokens ?? 0, cached_tokens: raw.usage?.cache_read_input_tokens ?? 0 };
}

export const anthropicAdapter: ProviderAdapter = {
  name: 'anthropic',
  tools: anthropicTools,
  body(model, prompt, context, maxOutputTokens, orchestrating = false) {
    return { model, max_tokens: maxOutputTokens, system: prompt.texts.system, tools: anthropicTools(prompt, orchestrating), messages: messages(context) };
  },
  async send(body, options: SendOptions) {
    // Every credential the SDK would take from the environment is given here instead (null: none).
    const client = new Anthropic({
      apiKey: options.apiKey,
      authToken: null,
      webhookKey: null,
      baseURL: options.baseURL,
      maxRetries: 0,
      timeout: options.timeoutMs,
      fetch: singleCredentialFetch(options.apiKey),
    });
    return client.messages.create(body as never, { signal: options.signal });
  },
  parse(raw): ParsedReply {
    const r = raw as { stop_reason?: string; content?: { type: string; text?: string; id?: string; name?: string; input?: unknown }[] };
    const usage = usageOf(raw as never);
    if (r.stop_reason === 'refusal') return { kind: 'refused', detail: 'refusal', usage };
    if (r.stop_reason === 'max_tokens') return { kind: 'truncated', usage };
    const blocks = r.content ?? [];
    const text = blocks.filter((b) => b.type === 'text').map((b) => b.text ?? '').join('\n') || null;
    const calls = blocks.filter((b) => b.type === 'tool_use');
    if (calls.length === 0) return { kind: 'decisions', decisions: [{ kind: 'final', text: text ?? '' }], usage };
    const decisions: ReplyDecision[] = text ? [{ kind: 'plan', text }] : [];
    for (const c of calls) decisions.push({ kind: 'tool', call: { call_id: c.id ?? '', name: c.name ?? '', arguments: c.input } });
    return { kind: 'decisions', decisions, usage };
  },
};
