/**
 * Anthropic Messages: all results of one reply go back in one user message, in order.
 *
 * Prompt caching: the request marks three `cache_control` breakpoints (of the four allowed), each
 * the end of a prefix that the next request repeats byte for byte: the system prompt (with the
 * tools before it), the task and its rules (the first user block), and the conversation so far.
 * What changes every turn (the run state, budgets left, tasks, notes) goes last, after the
 * conversation, so it never breaks a cached prefix. Compaction that drops early steps changes the
 * conversation's prefix: the first two breakpoints still hit.
 */
import Anthropic from '@anthropic-ai/sdk';
import type { BuiltContext } from '../core/context';
import { MessageAssembly, type MessageEvent } from './anthropic-stream';
import { singleCredentialFetch } from './secrets';
import { streamedReply, type ProviderStream } from './stream';
import { anthropicTools } from './tool-schemas';
import type { Usage } from '../core/contracts';
import type { ParsedReply, ProviderAdapter, ReplyDecision, SendOptions } from './types';

type Block = Record<string, unknown>;

const CACHED = { cache_control: { type: 'ephemeral' } } as const;

function messages(context: BuiltContext): { role: 'user' | 'assistant'; content: Block[] }[] {
  const out: { role: 'user' | 'assistant'; content: Block[] }[] = [
    { role: 'user', content: [{ type: 'text', text: context.stable, ...CACHED }] },
  ];
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
    for (const c of g.calls)
      content.push({
        type: 'tool_use',
        id: c.id,
        name: c.name,
        input: c.arguments !== null && typeof c.arguments === 'object' ? c.arguments : { value: c.arguments },
      });
    if (content.length === 0) content.push({ type: 'text', text: '(empty reply)' });
    out.push({ role: 'assistant', content });
    if (g.calls.length > 0)
      user(
        g.calls.map((c) => ({
          type: 'tool_result',
          tool_use_id: c.id,
          content: JSON.stringify(c.result),
          ...(c.result.ok ? {} : { is_error: true }),
        })),
      );
  }
  // The conversation so far is the next request's prefix too.
  if (context.groups.length > 0) {
    const last = out[out.length - 1].content;
    last[last.length - 1] = { ...last[last.length - 1], ...CACHED };
  }
  user([{ type: 'text', text: context.state }]);
  return out;
}

/**
 * Anthropic counts the input in three parts: `input_tokens` after the last breakpoint,
 * `cache_read_input_tokens` read from the cache and `cache_creation_input_tokens` written to it.
 * Usage counts them as one `input_tokens` of which `cached_tokens` were read (as OpenAI reports it).
 */
function usageOf(raw: {
  usage?: {
    input_tokens?: number;
    output_tokens?: number;
    cache_read_input_tokens?: number | null;
    cache_creation_input_tokens?: number | null;
  };
}): { usage: Usage; cache_write_tokens: number } {
  const read = raw.usage?.cache_read_input_tokens ?? 0;
  const written = raw.usage?.cache_creation_input_tokens ?? 0;
  return {
    usage: {
      model_calls: 1,
      cost_usd: null,
      input_tokens: (raw.usage?.input_tokens ?? 0) + read + written,
      output_tokens: raw.usage?.output_tokens ?? 0,
      cached_tokens: read,
    },
    cache_write_tokens: written,
  };
}

export const anthropicAdapter: ProviderAdapter = {
  name: 'anthropic',
  tools: anthropicTools,
  body(model, prompt, system, context, maxOutputTokens, orchestrating = false) {
    return {
      model,
      max_tokens: maxOutputTokens,
      system: [{ type: 'text', text: system, ...CACHED }],
      tools: anthropicTools(prompt, orchestrating),
      messages: messages(context),
    };
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
    const stream = await client.messages.create({ ...body, stream: true } as never, { signal: options.signal });
    return streamedReply(stream as unknown as ProviderStream<MessageEvent>, new MessageAssembly(), options);
  },
  parse(raw): ParsedReply {
    const r = raw as { stop_reason?: string; content?: { type: string; text?: string; id?: string; name?: string; input?: unknown }[] };
    const { usage, cache_write_tokens } = usageOf(raw as never);
    if (r.stop_reason === 'refusal') return { kind: 'refused', detail: 'refusal', usage, cache_write_tokens };
    if (r.stop_reason === 'max_tokens') return { kind: 'truncated', usage, cache_write_tokens };
    const blocks = r.content ?? [];
    const text =
      blocks
        .filter((b) => b.type === 'text')
        .map((b) => b.text ?? '')
        .join('\n') || null;
    const calls = blocks.filter((b) => b.type === 'tool_use');
    if (calls.length === 0) return { kind: 'decisions', decisions: [{ kind: 'final', text: text ?? '' }], usage, cache_write_tokens };
    const decisions: ReplyDecision[] = text ? [{ kind: 'plan', text }] : [];
    for (const c of calls) decisions.push({ kind: 'tool', call: { call_id: c.id ?? '', name: c.name ?? '', arguments: c.input } });
    return { kind: 'decisions', decisions, usage, cache_write_tokens };
  },
};
