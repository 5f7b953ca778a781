/**
 * A local server that speaks the OpenAI Chat Completions and the Anthropic Messages APIs, on
 * 127.0.0.1 and a free port, scripted per test. It logs every request, and answers a conversation
 * with an unanswered tool call by a 400, as both real APIs do. Not a live provider: a protocol
 * double driven through the official SDKs.
 *
 * A request with `stream: true` gets its scripted reply as the protocol streams it: Chat
 * Completions as `data:` chunks (the role first, the content, refusal and each tool call's
 * arguments in pieces, the finish reason, the usage chunk when `stream_options.include_usage`
 * asks for it, then `data: [DONE]`); Messages as its named events (message_start, a ping,
 * content_block_start / _delta / _stop per block, message_delta with the stop reason and output
 * tokens, message_stop). A script may hold a stream open after some events, or cut it.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Endpoint, ProvidersFile } from '../../core/contracts';

export type Api = 'openai' | 'anthropic';

export interface LoggedRequest {
  api: Api;
  path: string;
  headers: Record<string, string | string[] | undefined>;
  body: any;
  /** Bytes of the request body. */
  bytes: number;
}

/** How a streamed answer goes (a request without `stream` gets its body whole). */
export interface StreamPlan {
  /** Events sent before the stream is held open. */
  holdAfter?: number;
  /** The held stream goes on when this settles; without it, it is held until the client goes away. */
  release?: Promise<void>;
  /** The connection is cut after this many events (no further event, no end). */
  cutAfter?: number;
  /** After `after` events, the protocol's error event with `error` (`{type, message}`), then the end. */
  fail?: { after: number; error: { type: string; message: string } };
}

/** What the server does with one request. */
export type Scripted =
  | { status?: number; headers?: Record<string, string>; body: unknown; stream?: StreamPlan }
  /** Never answers (the client times out or aborts). */
  | { hang: true }
  /** Closes the connection without an answer. */
  | { drop: true };

export type Script = (request: LoggedRequest, index: number) => Scripted;

export interface ReplyCall {
  id: string;
  name: string;
  arguments: unknown;
}

/** A Chat Completions response. `arguments` that is a string goes out as is (malformed JSON included). */
export function openaiReply(
  opts: { text?: string | null; calls?: ReplyCall[]; finish?: string; refusal?: string; usage?: [number, number, number?] } = {},
): unknown {
  const [prompt, completion, cached] = opts.usage ?? [100, 20, 0];
  return {
    id: 'chatcmpl-test',
    object: 'chat.completion',
    created: 0,
    model: 'test-model',
    choices: [
      {
        index: 0,
        finish_reason: opts.finish ?? (opts.calls?.length ? 'tool_calls' : 'stop'),
        message: {
          role: 'assistant',
          content: opts.text ?? null,
          refusal: opts.refusal ?? null,
          ...(opts.calls?.length
            ? {
                tool_calls: opts.calls.map((c) => ({
                  id: c.id,
                  type: 'function',
                  function: { name: c.name, arguments: typeof c.arguments === 'string' ? c.arguments : JSON.stringify(c.arguments) },
                })),
              }
            : {}),
        },
      },
    ],
    usage: {
      prompt_tokens: prompt,
      completion_tokens: completion,
      total_tokens: prompt + completion,
      prompt_tokens_details: { cached_tokens: cached ?? 0 },
    },
  };
}

/**
 * A Messages response. `usage` is [all input, output, read from the cache, written to it], sent
 * the way Anthropic counts: `input_tokens` is only the input neither read from nor written to the cache.
 */
export function anthropicReply(
  opts: { text?: string | null; calls?: ReplyCall[]; stop?: string; usage?: [number, number, number?, number?] } = {},
): unknown {
  const [input, output, cached = 0, written = 0] = opts.usage ?? [100, 20, 0, 0];
  const content: unknown[] = [];
  if (opts.text) content.push({ type: 'text', text: opts.text });
  for (const c of opts.calls ?? []) content.push({ type: 'tool_use', id: c.id, name: c.name, input: c.arguments });
  return {
    id: 'msg_test',
    type: 'message',
    role: 'assistant',
    model: 'test-model',
    content,
    stop_reason: opts.stop ?? (opts.calls?.length ? 'tool_use' : 'end_turn'),
    stop_sequence: null,
    usage: {
      input_tokens: input - cached - written,
      output_tokens: output,
      cache_read_input_tokens: cached,
      cache_creation_input_tokens: written,
    },
  };
}

export const reply = (api: Api, opts: Parameters<typeof anthropicReply>[0] & { finish?: string; refusal?: string }) =>
  api === 'openai' ? openaiReply({ ...opts, usage: opts.usage && [opts.usage[0], opts.usage[1], opts.usage[2]] }) : anthropicReply(opts);

/** The ids of tool calls that a conversation leaves without a result. */
export function unansweredCalls(api: Api, body: any): string[] {
  const messages: any[] = body?.messages ?? [];
  const missing: string[] = [];
  messages.forEach((m, i) => {
    if (m.role !== 'assistant') return;
    if (api === 'openai') {
      const answered = new Set<string>();
      for (let j = i + 1; j < messages.length && messages[j].role === 'tool'; j++) answered.add(messages[j].tool_call_id);
      for (const c of m.tool_calls ?? []) if (!answered.has(c.id)) missing.push(c.id);
    } else {
      const next = messages[i + 1];
      const answered = new Set<string>(
        next?.role === 'user' && Array.isArray(next.content)
          ? next.content.filter((b: any) => b.type === 'tool_result').map((b: any) => b.tool_use_id)
          : [],
      );
      for (const b of Array.isArray(m.content) ? m.content : []) if (b.type === 'tool_use' && !answered.has(b.id)) missing.push(b.id);
    }
  });
  return missing;
}

/** A text in the pieces a stream sends it in. */
function pieces(text: string, size = 12): string[] {
  const out: string[] = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out;
}

/** The `data:` payloads of a Chat Completions stream of `reply` (an `openaiReply`), ending with `[DONE]`. */
export function openaiChunks(reply: any, includeUsage: boolean): string[] {
  const base = { id: reply.id, object: 'chat.completion.chunk', created: reply.created, model: reply.model, system_fingerprint: null };
  const chunk = (delta: unknown, finish: string | null = null) =>
    JSON.stringify({
      ...base,
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
      ...(includeUsage ? { usage: null } : {}),
    });
  const choice = reply.choices[0];
  const message = choice.message;
  const out = [chunk({ role: 'assistant', content: '', refusal: null })];
  for (const p of pieces(message.content ?? '')) out.push(chunk({ content: p }));
  for (const p of pieces(message.refusal ?? '')) out.push(chunk({ refusal: p }));
  (message.tool_calls ?? []).forEach((c: any, index: number) => {
    out.push(chunk({ tool_calls: [{ index, id: c.id, type: 'function', function: { name: c.function.name, arguments: '' } }] }));
    for (const p of pieces(c.function.arguments)) out.push(chunk({ tool_calls: [{ index, function: { arguments: p } }] }));
  });
  out.push(chunk({}, choice.finish_reason));
  if (includeUsage) out.push(JSON.stringify({ ...base, choices: [], usage: reply.usage }));
  out.push('[DONE]');
  return out;
}

/** The named events of a Messages stream of `reply` (an `anthropicReply`). */
export function anthropicEvents(reply: any): { event: string; data: unknown }[] {
  const { content, stop_reason, stop_sequence, usage, ...message } = reply;
  const out: { event: string; data: any }[] = [
    {
      event: 'message_start',
      data: {
        type: 'message_start',
        message: { ...message, content: [], stop_reason: null, stop_sequence: null, usage: { ...usage, output_tokens: 1 } },
      },
    },
    { event: 'ping', data: { type: 'ping' } },
  ];
  content.forEach((block: any, index: number) => {
    const start = block.type === 'text' ? { type: 'text', text: '' } : { ...block, input: {} };
    out.push({ event: 'content_block_start', data: { type: 'content_block_start', index, content_block: start } });
    const deltas =
      block.type === 'text'
        ? pieces(block.text).map((text) => ({ type: 'text_delta', text }))
        : pieces(JSON.stringify(block.input)).map((partial_json) => ({ type: 'input_json_delta', partial_json }));
    for (const delta of deltas) out.push({ event: 'content_block_delta', data: { type: 'content_block_delta', index, delta } });
    out.push({ event: 'content_block_stop', data: { type: 'content_block_stop', index } });
  });
  out.push({
    event: 'message_delta',
    data: { type: 'message_delta', delta: { stop_reason, stop_sequence }, usage: { output_tokens: usage.output_tokens } },
  });
  out.push({ event: 'message_stop', data: { type: 'message_stop' } });
  return out;
}

/** The SSE text of each event of a streamed answer to `body` (the request's). */
export function sseEvents(api: Api, reply: unknown, body: any): string[] {
  if (api === 'openai') return openaiChunks(reply, body?.stream_options?.include_usage === true).map((d) => `data: ${d}\n\n`);
  return anthropicEvents(reply).map((e) => `event: ${e.event}\ndata: ${JSON.stringify(e.data)}\n\n`);
}

/** Adds (or replaces) an endpoint in a worker's providers file; returns its name. */
export function addEndpoint(file: string, endpoint: Endpoint): string {
  const current: ProvidersFile = existsSync(file) ? JSON.parse(readFileSync(file, 'utf8')) : { schema_version: 1, endpoints: [] };
  const endpoints = [...current.endpoints.filter((e) => e.name !== endpoint.name), endpoint];
  writeFileSync(file, JSON.stringify({ schema_version: 1, endpoints }));
  return endpoint.name;
}

/** The endpoint of a test server as a worker operator would list it. */
export function endpointOf(api: Api, server: ProviderServer, api_key_env: string): Endpoint {
  return { name: `test-${api}-${server.port}`, kind: api, base_url: api === 'openai' ? `${server.url}/v1` : server.url, api_key_env };
}

export class ProviderServer {
  readonly requests: LoggedRequest[] = [];
  /** Requests whose client went away before an answer (aborted or timed out). */
  aborted = 0;
  /** Answers sent to their end: a whole body, or a stream through its last event. */
  completed = 0;
  /** Streams held open by their script right now. */
  held = 0;
  private server: Server | null = null;
  port = 0;
  private readonly hanging = new Set<ServerResponse>();

  /** `port` 0: any free port. */
  constructor(
    private readonly script: Script,
    private readonly listenPort = 0,
  ) {}

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  count(api?: Api): number {
    return this.requests.filter((r) => api === undefined || r.api === api).length;
  }

  async start(): Promise<this> {
    this.server = createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((resolve) => this.server!.listen(this.listenPort, '127.0.0.1', resolve));
    this.port = (this.server!.address() as { port: number }).port;
    return this;
  }

  async close(): Promise<void> {
    for (const res of this.hanging) res.destroy();
    this.server?.closeAllConnections();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const raw = Buffer.concat(chunks);
    const path = (req.url ?? '').split('?')[0];
    const api: Api | null = path.endsWith('/chat/completions') ? 'openai' : path.endsWith('/messages') ? 'anthropic' : null;
    const send = (status: number, body: unknown, headers: Record<string, string> = {}) => {
      res.writeHead(status, { 'content-type': 'application/json', ...headers });
      res.end(JSON.stringify(body), () => this.completed++);
    };
    if (api === null) return send(404, { error: { type: 'not_found', message: `no such endpoint ${path}` } });
    let body: any;
    try {
      body = JSON.parse(raw.toString('utf8'));
    } catch {
      return send(400, { error: { type: 'invalid_request_error', message: 'body is not JSON' } });
    }
    const logged: LoggedRequest = { api, path, headers: req.headers, body, bytes: raw.length };
    this.requests.push(logged);
    const missing = unansweredCalls(api, body);
    if (missing.length > 0) {
      return send(400, {
        type: 'error',
        error: {
          type: 'invalid_request_error',
          code: 'invalid_request_error',
          message: `tool calls without a result: ${missing.join(', ')}`,
        },
      });
    }
    const scripted = this.script(logged, this.requests.length - 1);
    if ('hang' in scripted) {
      this.hanging.add(res);
      res.on('close', () => {
        if (!res.writableEnded) this.aborted++;
        this.hanging.delete(res);
      });
      return;
    }
    if ('drop' in scripted) return void req.socket.destroy();
    const status = scripted.status ?? 200;
    // Errors come before a stream starts, as a JSON body, as both real APIs send them.
    if (body.stream === true && status < 300) return this.stream(api, res, scripted, body);
    send(status, scripted.body, scripted.headers);
  }

  private async stream(api: Api, res: ServerResponse, scripted: Extract<Scripted, { body: unknown }>, body: any): Promise<void> {
    const plan = scripted.stream ?? {};
    let cut = false;
    const gone = new Promise<void>((resolve) =>
      res.on('close', () => {
        if (!res.writableEnded && !cut) this.aborted++;
        this.hanging.delete(res);
        resolve();
      }),
    );
    this.hanging.add(res);
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', ...scripted.headers });
    for (const [i, event] of sseEvents(api, scripted.body, body).entries()) {
      if (i === plan.cutAfter) {
        cut = true;
        return void res.socket?.destroy();
      }
      if (i === plan.fail?.after) {
        const error = plan.fail.error;
        const event =
          api === 'openai'
            ? `data: ${JSON.stringify({ error: { ...error, code: error.type } })}\n\n`
            : `event: error\ndata: ${JSON.stringify({ type: 'error', error })}\n\n`;
        return void res.end(event);
      }
      if (i === plan.holdAfter) {
        this.held++;
        await Promise.race([plan.release ?? new Promise<void>(() => undefined), gone]);
        this.held--;
      }
      if (res.destroyed) return;
      // Each event reaches the socket before the next (and before a cut), as a real stream's would.
      await new Promise<void>((resolve) => res.write(event, () => resolve()));
    }
    res.end(() => this.completed++);
  }
}

/** The servers of a test file: `serve` starts one on a free port; each is closed after its test. */
export function servedPerTest(): (script: Script) => Promise<ProviderServer> {
  const servers: ProviderServer[] = [];
  afterEach(async () => {
    for (const s of servers.splice(0)) await s.close();
  });
  return async (script) => {
    const server = await new ProviderServer(script).start();
    servers.push(server);
    return server;
  };
}
