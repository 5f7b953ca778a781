/**
 * A Messages stream (message_start, content_block_start / _delta / _stop, message_delta,
 * message_stop) put back together as the message the same request without `stream` returns:
 * its content blocks (text joined, a tool call's input parsed from its JSON deltas), stop reason
 * and usage (message_start's input and cache counts, message_delta's output and any count it
 * repeats). `anthropicAdapter.parse` then reads it as it reads any response.
 */
import { StreamCut } from './errors';

type Block = Record<string, unknown> & { type: string };

export interface MessageEvent {
  type: string;
  index?: number;
  message?: Record<string, unknown> & { usage?: Record<string, unknown> };
  content_block?: Block;
  delta?: Record<string, unknown> & { type?: string };
  usage?: Record<string, unknown>;
}

export class MessageAssembly {
  private message: (Record<string, unknown> & { usage: Record<string, unknown> }) | null = null;
  private readonly blocks: Block[] = [];
  /** A tool call's input as its JSON deltas arrive, by block index. */
  private readonly json = new Map<number, string>();
  private stopped = false;

  /**
   * Adds one event; returns the text it adds to the reply as `parse` joins it (text blocks are
   * joined with a newline, so a second text block begins with one). Empty when none.
   */
  add(event: MessageEvent): string {
    switch (event.type) {
      case 'message_start':
        this.message = { ...event.message, usage: { ...event.message?.usage } };
        return '';
      case 'content_block_start': {
        const block = { ...event.content_block! };
        const earlierText = this.blocks.some((b) => b?.type === 'text');
        this.blocks[event.index!] = block;
        if (block.type === 'tool_use') this.json.set(event.index!, '');
        const text = block.type === 'text' && typeof block.text === 'string' ? block.text : '';
        return block.type === 'text' && earlierText ? `\n${text}` : text;
      }
      case 'content_block_delta':
        return this.delta(event.index!, event.delta ?? {});
      case 'content_block_stop': {
        const json = this.json.get(event.index!);
        // No delta (a tool without arguments) keeps the start's input; JSON that does not parse is passed on as text.
        if (json) this.blocks[event.index!].input = parseJson(json);
        return '';
      }
      case 'message_delta':
        if (this.message) {
          Object.assign(this.message, event.delta);
          for (const [k, v] of Object.entries(event.usage ?? {})) if (v !== null && v !== undefined) this.message.usage[k] = v;
        }
        return '';
      case 'message_stop':
        this.stopped = true;
        return '';
      default:
        return '';
    }
  }

  private delta(index: number, delta: Record<string, unknown>): string {
    const block = this.blocks[index];
    if (block === undefined) return '';
    switch (delta.type) {
      case 'text_delta':
        block.text = `${(block.text as string | undefined) ?? ''}${delta.text as string}`;
        return delta.text as string;
      case 'input_json_delta':
        this.json.set(index, `${this.json.get(index) ?? ''}${delta.partial_json as string}`);
        return '';
      case 'thinking_delta':
        block.thinking = `${(block.thinking as string | undefined) ?? ''}${delta.thinking as string}`;
        return '';
      case 'signature_delta':
        block.signature = delta.signature;
        return '';
      default:
        return '';
    }
  }

  /** The whole message; a `StreamCut` when the stream ended before message_stop. */
  response(): unknown {
    if (this.message === null || !this.stopped) throw new StreamCut('the reply stream ended before message_stop');
    return { ...this.message, content: this.blocks.filter((b) => b !== undefined) };
  }
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
