/**
 * Streamed model output. First through each adapter alone, against the local server that streams
 * both protocols through the official SDKs: the reply put back together from its stream is the
 * reply the server would have sent whole, its text arrives in pieces that join to exactly the
 * reply's text, and a stream that breaks off is a transient failure. Then whole live runs on the
 * docker backend: fragments in the host store and on a console's event stream before the turn
 * ends, the turn's recorded text and the stream's turn-end frames equal to them (a client of frame
 * version 1 getting none of either), and a worker SIGKILLed mid-stream.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { startConsole } from '../client/console/server';
import { API_TOKENS_FILE, readApiTokens } from '../client/console/token';
import { queryState, startRun } from '../client/run-access';
import type { RunInput } from '../core/contracts';
import { FRAME_TYPES, type FrameType } from '../core/delivery';
import type { RunOutcome } from '../core/run-view';
import type { TraceEvent } from '../core/trace';
import { Store, type Fragment } from '../store/store';
import { anthropicAdapter } from '../models/anthropic';
import { classify } from '../models/errors';
import { openaiAdapter } from '../models/openai';
import type { ProviderAdapter } from '../models/types';
import { SseClient } from './helpers/sse';
import { LINKCHECK, tempDir, requireDockerSandbox } from './helpers/run-dir';
import {
  addEndpoint,
  endpointOf,
  ProviderServer,
  servedPerTest,
  reply,
  type Api,
  type ReplyCall,
  type Script,
  type StreamPlan,
} from './helpers/provider-server';
import {
  CANONICAL_RECORD,
  CURRENT_PROMPT,
  killed,
  runOnce,
  spawnWorker,
  startServer,
  traceIn,
  traceOf,
  uniqueQueue,
  waitFor,
} from './helpers/temporal';

const KEY = 'sk-test-streaming-5c2e9f';
const KEY_ENV = 'AGENT_TEST_STREAMING_KEY';
process.env[KEY_ENV] = KEY;

const ADAPTERS: Record<Api, ProviderAdapter> = { openai: openaiAdapter, anthropic: anthropicAdapter };

const serve = servedPerTest();

const LONG_PLAN = `Read the checker and its tests, reproduce with a failing test, then fix. ${'Relative links resolve from the folder of the document that holds them. '.repeat(6)}`;
const CALL: ReplyCall = { id: 'read-source', name: 'read_file', arguments: { path: 'src/linkcheck.py', start: 1, end: 40 } };

/** The text of a whole reply: Chat Completions' content, the Messages' text blocks joined by a newline. */
function textOf(api: Api, whole: any): string {
  if (api === 'openai') return whole.choices[0].message.content ?? '';
  return whole.content
    .filter((b: { type: string }) => b.type === 'text')
    .map((b: { text: string }) => b.text)
    .join('\n');
}

/** One request through the adapter alone (no run): what it resolves to and the text pieces it passed on. */
async function sendOnce(api: Api, server: ProviderServer, timeoutMs = 5000) {
  const pieces: string[] = [];
  const body =
    api === 'openai'
      ? { model: 'test-model', messages: [{ role: 'user', content: 'hi' }] }
      : { model: 'test-model', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] };
  const raw = await ADAPTERS[api].send(body, {
    apiKey: KEY,
    baseURL: api === 'openai' ? `${server.url}/v1` : server.url,
    timeoutMs,
    signal: new AbortController().signal,
    onText: (t) => pieces.push(t),
  });
  return { raw, pieces };
}

describe.each(['openai', 'anthropic'] as const)('a %s reply streamed through the SDK', (api) => {
  const cases: [string, Parameters<typeof reply>[1]][] = [
    ['text and a tool call', { text: LONG_PLAN, calls: [CALL] }],
    ['two tool calls and no text', { calls: [CALL, { id: 'two', name: 'search', arguments: { query: 'resolve(' } }] }],
    ['a final text', { text: 'Fixed: relative links now resolve from the document folder.' }],
    ['malformed arguments', { calls: [{ id: 'broken', name: 'read_file', arguments: '{"path": "src/link' }] }],
    ['a reply cut off by the output limit', { calls: [CALL], finish: 'length', stop: 'max_tokens' }],
    ['cached input and a cache write', { text: 'ok', usage: [2000, 30, 1536, 200] }],
    api === 'openai' ? ['a refusal', { refusal: 'I cannot help with that' }] : ['a refusal', { text: 'no', stop: 'refusal' }],
  ];

  it.each(cases)('is put back together exactly as the whole reply: %s', async (_name, opts) => {
    const whole = reply(api, opts);
    const server = await serve(() => ({ body: whole }));
    const { raw, pieces } = await sendOnce(api, server);
    expect(server.requests[0].body.stream).toBe(true);
    if (api === 'openai') expect(server.requests[0].body.stream_options).toEqual({ include_usage: true });
    expect(raw).toEqual(whole);
    expect(ADAPTERS[api].parse(raw)).toEqual(ADAPTERS[api].parse(whole));
    // The text as it streamed, in more than one piece when it is longer than one.
    expect(pieces.join('')).toBe(textOf(api, whole));
    if (textOf(api, whole).length > 12) expect(pieces.length).toBeGreaterThan(1);
  });

  it('puts two text blocks together as the reply joins them, newline included', async () => {
    if (api === 'openai') return; // one content string per choice
    const whole = {
      ...(reply('anthropic', { text: 'first part' }) as object),
      content: [
        { type: 'text', text: 'first part' },
        { type: 'text', text: 'second part' },
      ],
    };
    const server = await serve(() => ({ body: whole }));
    const { raw, pieces } = await sendOnce(api, server);
    expect(raw).toEqual(whole);
    expect(pieces.join('')).toBe('first part\nsecond part');
  });

  it('takes a stream cut mid-reply as a transient failure, not a reply', async () => {
    const server = await serve(() => ({ body: reply(api, { text: LONG_PLAN, calls: [CALL] }), stream: { cutAfter: 4 } }));
    const err = await sendOnce(api, server).catch((e: unknown) => e);
    expect(classify(err)).toMatchObject({ transient: true, detail: expect.stringMatching(/stream (broke off|ended before)/) });
  });

  it.each([
    ['overloaded_error', true],
    ['invalid_request_error', false],
  ])('takes an error event inside the stream (%s) as a provider failure, transient: %s', async (type, transient) => {
    const error = { type, message: `${type} while streaming` };
    const server = await serve(() => ({ body: reply(api, { text: LONG_PLAN }), stream: { fail: { after: 4, error } } }));
    const err = await sendOnce(api, server).catch((e: unknown) => e);
    expect(classify(err)).toMatchObject({ transient, status: null, detail: expect.stringContaining(`${type} while streaming`) });
  });

  it('aborts a stream that goes silent for the request timeout, as a transient failure', async () => {
    const server = await serve(() => ({ body: reply(api, { text: LONG_PLAN }), stream: { holdAfter: 3 } }));
    const err = await sendOnce(api, server, 1000).catch((e: unknown) => e);
    // The detail is the silence limit's own: the stream was cut by it, not by the server's end.
    expect(classify(err)).toMatchObject({ transient: true, detail: 'the reply stream sent nothing for 1 s' });
    await waitFor('the server to see the stream closed', async () => server.aborted === 1, 5000);
  });
});

// ---- whole live runs ----

let env: TestWorkflowEnvironment | undefined;
const liveEnv = async (): Promise<TestWorkflowEnvironment> => {
  if (env) return env;
  await requireDockerSandbox();
  return (env = await startServer());
};
afterAll(async () => {
  await env?.teardown();
});

const PROVIDERS = join(tempDir('streaming-providers'), 'providers.json');
const liveInput = (api: Api, server: ProviderServer): RunInput => ({
  fixture: LINKCHECK,
  source: { kind: 'provider', endpoint: addEndpoint(PROVIDERS, endpointOf(api, server, KEY_ENV)), model: 'test-model' },
  backend: 'docker',
  approver: 'policy:approve-writable',
});

/** The canonical session as replies, the first one's plan long enough to stream in many pieces. */
const REPLIES: { text?: string; calls?: ReplyCall[] }[] = (() => {
  const decisions = JSON.parse(readFileSync(join(LINKCHECK, 'replays', 'canonical.json'), 'utf8')).decisions as {
    kind: string;
    text?: string;
    call?: ReplyCall & { call_id: string };
  }[];
  const calls = decisions
    .filter((d) => d.kind === 'tool')
    .map((d) => ({ id: d.call!.call_id, name: d.call!.name, arguments: d.call!.arguments }));
  const final = decisions.find((d) => d.kind === 'final')!.text!;
  return [{ text: LONG_PLAN, calls: [calls[0]] }, ...calls.slice(1).map((c) => ({ calls: [c] })), { text: final }];
})();
const FINAL = REPLIES.at(-1)!.text!;

/**
 * The session, one reply per request; the first request's stream goes as `plan` says. `askedAgain`:
 * the first reply is asked for twice (its first stream never ends), so request `i` gets reply `i - 1` after it.
 */
function session(api: Api, plan: StreamPlan, askedAgain = false): Script {
  return (_req, i) => ({
    body: reply(api, REPLIES[askedAgain && i > 0 ? i - 1 : i] ?? { text: 'done' }),
    ...(i === 0 ? { stream: plan } : {}),
  });
}

const API_TOKEN = 'streaming-test-api-token-0123456789-0123456789';

/** A console over the run's state folder and two clients of its event stream, of frame versions 2 and 1. */
async function followers(environment: TestWorkflowEnvironment, stateDir: string, workflowId: string) {
  writeFileSync(join(stateDir, API_TOKENS_FILE), `reader ${API_TOKEN}\n`, { mode: 0o600 });
  const app = await startConsole({
    client: environment.client,
    token: 'streaming-test-console-token-0123456789',
    host: '127.0.0.1',
    port: 0,
    webUi: null,
    namespace: 'default',
    stateDir,
    apiTokens: readApiTokens(join(stateDir, API_TOKENS_FILE)),
    recordDir: stateDir,
    confirmMs: 30_000,
    keepAliveMs: 1000,
  });
  const client = (v: number) =>
    new SseClient(`${app.url}/api/runs/${encodeURIComponent(workflowId)}/events?v=${v}`, { authorization: `Bearer ${API_TOKEN}` });
  const v2 = client(2);
  const v1 = client(1);
  v2.connect();
  v1.connect();
  return {
    v1,
    v2,
    close: async () => {
      v1.cut();
      v2.cut();
      await app.close();
    },
  };
}

/** A run's fragments by turn: the text of each turn's latest stream, and every stream's. */
function fragmentsOf(store: Store, runId: string) {
  const all: Fragment[] = [];
  for (let page = store.fragmentsAfter(runId, null); page.length > 0; page = store.fragmentsAfter(runId, page.at(-1)!)) all.push(...page);
  const streams = new Map<number, Map<number, string>>();
  for (const f of all) {
    const turn = streams.get(f.turn) ?? new Map<number, string>();
    turn.set(f.stream, (turn.get(f.stream) ?? '') + f.text);
    streams.set(f.turn, turn);
  }
  const latest = Object.fromEntries([...streams].map(([turn, byStream]) => [turn, byStream.get(Math.max(...byStream.keys()))!]));
  return { latest, streams, all };
}

/** Each turn's text as the run recorded it: the stored plan and final decisions, by the turn of their request. */
function recordedTexts(trace: TraceEvent[]): Record<number, string> {
  const texts: Record<number, string> = {};
  let turn = 0;
  for (const e of trace) {
    const data = e.data as { turn?: number; text?: string; final?: string };
    if (e.type === 'model_requested') turn = data.turn!;
    if (e.type === 'plan_recorded') texts[turn] = data.text!;
    if (e.type === 'verification_started') texts[turn] = data.final!;
  }
  return texts;
}

const CANONICAL_LIVE = {
  ...CANONICAL_RECORD,
  replay: null,
  turns: 7,
  usage: { model_calls: 7, input_tokens: 700, output_tokens: 140, cached_tokens: 0, cost_usd: null },
  prompt: CURRENT_PROMPT,
};

describe.each(['openai', 'anthropic'] as const)('a live run on the %s protocol, streamed', (api) => {
  it('writes the reply text to the host store and to a console event stream while it streams, before the turn ends, and ends the turn with the recorded text', async () => {
    const environment = await liveEnv();
    let release = () => undefined as void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const server = await serve(session(api, { holdAfter: 5, release: released }));
    let stateDir = '';
    let streams: Awaited<ReturnType<typeof followers>> | undefined;
    const { outcome, trace, runId } = await runOnce(environment, liveInput(api, server), {
      providersFile: PROVIDERS,
      prepareState: (dir) => void (stateDir = dir),
      drive: async (handle) => {
        const file = join(stateDir, 'store.sqlite');
        await waitFor('the host store', async () => existsSync(file));
        const store = new Store(file);
        const id = (await handle.describe()).runId; // the run does not continue as new
        streams = await followers(environment, stateDir, handle.workflowId);
        try {
          const seen = await waitFor('fragments of turn 1', async () => fragmentsOf(store, id).latest[1]);
          // The client of version 2 gets them as fragment frames, before the turn has ended.
          await streams.v2.waitFor('a fragment frame', (f) => f.event === 'fragment');
          expect(streams.v2.frames.some((f) => f.event === 'turn_end')).toBe(false);
          // Mid-reply: the server holds the stream, and the run has neither the reply nor a second request.
          expect(server.held).toBe(1);
          expect(server.count()).toBe(1);
          expect((await queryState(handle)).counters.turns).toBe(1);
          expect((await traceOf(handle)).some((e) => e.type === 'plan_recorded')).toBe(false);
          expect(seen.length).toBeGreaterThan(0);
          expect(seen.length).toBeLessThan(LONG_PLAN.length);
          expect(LONG_PLAN.startsWith(seen)).toBe(true);
        } finally {
          store.close();
          release();
        }
        await streams.v2.waitFor('the end', (f) => f.event === 'end', 120_000);
        await streams.v1.waitFor('the end', (f) => f.event === 'end', 120_000);
      },
    }).finally(() => streams?.close());
    expect(outcome.record).toEqual(CANONICAL_LIVE);
    // The stream's turn ends: each reply's whole text keyed by its turn, equal to what the run recorded;
    // every fragment of a turn came before its end. A client of version 1 got no frame of version 2.
    const { v1, v2 } = streams!;
    const ends = v2.frames.filter((f) => f.event === 'turn_end');
    expect(Object.fromEntries(ends.map((f) => [f.data.turn, f.data.text]))).toEqual(recordedTexts(trace));
    for (const f of v2.frames.filter((x) => x.event === 'fragment'))
      expect(v2.frames.indexOf(f)).toBeLessThan(v2.frames.indexOf(ends.find((e) => e.data.turn === f.data.turn)!));
    expect(v1.frames.filter((f) => FRAME_TYPES[f.event as FrameType].version > 1)).toEqual([]);
    expect(v2.frames.some((f) => f.event === 'fragment') && v1.frames.some((f) => f.event === 'trace')).toBe(true);
    expect(v1.events()).toEqual(v2.events());
    expect(server.count()).toBe(REPLIES.length);
    const store = new Store(join(stateDir, 'store.sqlite'));
    try {
      const { latest, streams } = fragmentsOf(store, runId);
      // Only the turns whose reply had text streamed any, once each; their text is the recorded one.
      expect(latest).toEqual({ 1: LONG_PLAN, [REPLIES.length]: FINAL });
      expect([...streams.values()].map((byStream) => byStream.size)).toEqual([1, 1]);
      expect(latest).toEqual(recordedTexts(trace));
    } finally {
      store.close();
    }
  });

  it('gives the whole reply once after a worker SIGKILLed mid-stream: the request asked again, one reply stored, counted and priced', async () => {
    const environment = await liveEnv();
    const server = await serve(session(api, { holdAfter: 5 }, true));
    const stateDir = tempDir('killed-mid-stream');
    const taskQueue = uniqueQueue('mid-stream');
    const handle = await startRun(environment.client, liveInput(api, server), { taskQueue, workflowId: `${taskQueue}-run` });
    const runId = handle.firstExecutionRunId;
    const workerEnv = { AGENT_PROVIDERS_FILE: PROVIDERS };
    const first = spawnWorker(environment, taskQueue, stateDir, workerEnv);
    const file = join(stateDir, 'store.sqlite');
    const partial = await waitFor('fragments of turn 1 while the stream is held', async () => {
      if (server.held !== 1 || !existsSync(file)) return null;
      const store = new Store(file);
      try {
        return fragmentsOf(store, runId).latest[1];
      } finally {
        store.close();
      }
    });
    first.kill('SIGKILL');
    await killed(first);
    const second = spawnWorker(environment, taskQueue, stateDir, workerEnv);
    try {
      const outcome = (await handle.result()) as RunOutcome;
      expect(outcome.record).toEqual(CANONICAL_LIVE);
    } finally {
      second.kill('SIGTERM');
      await killed(second);
    }
    // The cut stream: asked again with the very same request; seven replies streamed to their end, seven counted.
    expect(server.count()).toBe(REPLIES.length + 1);
    expect(server.requests[1].body).toEqual(server.requests[0].body);
    expect(server.aborted).toBe(1);
    expect(server.completed).toBe(REPLIES.length);
    const trace = traceIn(stateDir, runId);
    expect(trace.filter((e) => e.type === 'plan_recorded').map((e) => (e.data as { text: string }).text)).toEqual([LONG_PLAN]);
    expect(trace.filter((e) => e.type === 'model_usage' && (e.data as { turn: number }).turn === 1)).toHaveLength(1);
    const store = new Store(file);
    try {
      const { latest, streams } = fragmentsOf(store, runId);
      // The cut stream's fragments stay as they were, a beginning of the text; the second stream's are the whole text, once.
      expect([...streams.get(1)!.keys()]).toEqual([1, 2]);
      expect(streams.get(1)!.get(1)).toBe(partial);
      expect(LONG_PLAN.startsWith(partial) && partial.length < LONG_PLAN.length).toBe(true);
      expect(latest).toEqual({ 1: LONG_PLAN, [REPLIES.length]: FINAL });
      expect(latest).toEqual(recordedTexts(trace));
    } finally {
      store.close();
    }
  });
});
