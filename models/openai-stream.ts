/**
 * A Chat Completions stream (`stream: true`, usage in its last chunk) put back together as the
 * response the same request without `stream` returns: id, model, each choice's role, content,
 * refusal, tool calls (arguments joined as sent, malformed JSON included) and finish reason, and
 * the usage with its cached tokens. `openaiAdapter.parse` then reads it as it reads any response.
 */
import { StreamCut } from './errors';

interface ChunkToolCall {
  index: number;
  id?: string;
  type?: string;
  function?: { name?: string; arguments?: string };
}

export interface ChatChunk {
  id?: string;
  created?: number;
  model?: string;
  system_fingerprint?: string | null;
  service_tier?: string | null;
  choices?: {
    index: number;
    finish_reason?: string | null;
    delta?: { role?: string; content?: string | null; refusal?: string | null; tool_calls?: ChunkToolCall[] };
  }[];
  usage?: unknown;
}

interface Choice {
  index: number;
  finish_reason: string | null;
  message: {
    role: string;
    content: string | null;
    refusal: string | null;
    tool_calls?: { id: string; type: string; function: { name: string; arguments: string } }[];
  };
}

export class ChatAssembly {
  private readonly top: Record<string, unknown> = {};
  private readonly choices: Choice[] = [];
  private usage: unknown = null;
  private chunks = 0;

  /** Adds one chunk; returns the text it adds to the first choice's content (empty when none). */
  add(chunk: ChatChunk): string {
    this.chunks++;
    for (const key of ['id', 'created', 'model', 'system_fingerprint', 'service_tier'] as const)
      if (chunk[key] !== undefined && chunk[key] !== null) this.top[key] = chunk[key];
    if (chunk.usage !== undefined && chunk.usage !== null) this.usage = chunk.usage;
    let text = '';
    for (const c of chunk.choices ?? []) {
      const choice = (this.choices[c.index] ??= {
        index: c.index,
        finish_reason: null,
        message: { role: 'assistant', content: null, refusal: null },
      });
      if (c.finish_reason) choice.finish_reason = c.finish_reason;
      const delta = c.delta ?? {};
      if (delta.role) choice.message.role = delta.role;
      // The first chunk's empty content is no content: a reply of tool calls only has `content: null`.
      if (delta.content) {
        choice.message.content = (choice.message.content ?? '') + delta.content;
        if (c.index === 0) text += delta.content;
      }
      if (delta.refusal) choice.message.refusal = (choice.message.refusal ?? '') + delta.refusal;
      for (const t of delta.tool_calls ?? []) {
        const calls = (choice.message.tool_calls ??= []);
        const call = (calls[t.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } });
        if (t.id) call.id = t.id;
        if (t.type) call.type = t.type;
        if (t.function?.name) call.function.name = t.function.name;
        if (t.function?.arguments) call.function.arguments += t.function.arguments;
      }
    }
    return text;
  }

  /** The whole response; a `StreamCut` when the stream ended before every choice had its finish reason. */
  response(): unknown {
    if (this.chunks === 0 || this.choices.length === 0 || this.choices.some((c) => c === undefined || c.finish_reason === null))
      throw new StreamCut('the reply stream ended before its finish reason');
    return {
      ...this.top,
      object: 'chat.completion',
      choices: this.choices,
      ...(this.usage !== null ? { usage: this.usage } : {}),
    };
  }
}
