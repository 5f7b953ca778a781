/**
 * A local server that speaks the OpenAI Chat Completions and the Anthropic Messages APIs, on
 * 127.0.0.1 and a free port, scripted per test. It logs every request, and answers a conversation
 * with an unanswered tool call by a 400, as both real APIs do. Not a live provider: a protocol
 * double driven through the official SDKs.
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

/** What the server does with one request. */
export type Scripted =
  | { status?: number; headers?: Record<string, string>; body: unknown }
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
      res.end(JSON.stringify(body));
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
    send(scripted.status ?? 200, scripted.body, scripted.headers);
  }
}
