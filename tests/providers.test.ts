/**
 * Live providers through the official SDKs against a local server that speaks both protocols
 * (tests/helpers/provider-server.ts), on the docker backend with verified isolation and a real
 * Temporal server. Every case states its exact outcome and the exact number of requests.
 */
import { execFile } from 'node:child_process';
import { cpSync, createWriteStream, existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { WorkflowHandle } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Store } from '../store/store';
import { exportReplay } from '../client/export-replay';
import { temporalBinary } from '../host/temporal-bin';
import type { RunInput } from '../core/contracts';
import { historyJson } from './helpers/leaks';
import { LINKCHECK, PROJECT_ROOT, tempDir, SETTINGS, requireDockerSandbox } from './helpers/run-dir';
import {
  addEndpoint,
  endpointOf,
  ProviderServer,
  servedPerTest,
  reply,
  type Api,
  type ReplyCall,
  type Script,
  type Scripted,
} from './helpers/provider-server';
import {
  approveAll,
  CANONICAL_RECORD,
  CURRENT_PROMPT,
  killed,
  runOnce,
  spawnWorker,
  startServer,
  traceIn,
  uniqueQueue,
  waitFor,
  type RunOnceOptions,
} from './helpers/temporal';
import { startRun } from '../client/run-access';
import type { RunOutcome } from '../core/run-view';

const exec = promisify(execFile);
/** A distinctive fake key: it must reach the provider and nothing else. */
const KEY = 'sk-test-LEAKCANARY-6f1d2c9a8b7e';
const KEY_ENV = 'AGENT_TEST_PROVIDER_KEY';
process.env[KEY_ENV] = KEY;

let env: TestWorkflowEnvironment;
beforeAll(async () => {
  await requireDockerSandbox();
  env = await startServer();
});
afterAll(async () => {
  await env?.teardown();
});

const CANONICAL = JSON.parse(readFileSync(join(LINKCHECK, 'replays', 'canonical.json'), 'utf8')).decisions as {
  kind: string;
  text?: string;
  call?: { call_id: string; name: string; arguments: unknown };
}[];
/** The canonical session as model replies: the plan goes with the first call, one call a reply, then the final text. */
const CANONICAL_REPLIES: { text?: string; calls?: ReplyCall[] }[] = (() => {
  const replies: { text?: string; calls?: ReplyCall[] }[] = [];
  let text: string | undefined;
  for (const d of CANONICAL) {
    if (d.kind === 'plan') text = d.text;
    if (d.kind === 'tool') {
      replies.push({ text, calls: [{ id: d.call!.call_id, name: d.call!.name, arguments: d.call!.arguments }] });
      text = undefined;
    }
    if (d.kind === 'final') replies.push({ text: d.text });
  }
  return replies;
})();
const CANONICAL_REQUESTS = CANONICAL_REPLIES.length; // 7

/**
 * A script: the special answers first, one per request, then the canonical session, one reply
 * per request that reaches it.
 */
function session(api: Api, ...first: (Scripted | ((i: number) => Scripted))[]): Script {
  let played = 0;
  return (_req, i) => {
    if (i < first.length) {
      const s = first[i];
      return typeof s === 'function' ? s(i) : s;
    }
    const next = CANONICAL_REPLIES[played++];
    return { body: reply(api, next ?? { text: 'done' }) };
  };
}

const serve = servedPerTest();

/** The worker operator's providers file shared by this file's runs: one endpoint per test server. */
const PROVIDERS = join(tempDir('providers'), 'providers.json');

function liveInput(api: Api, server: ProviderServer, overrides: Partial<RunInput> = {}): RunInput {
  return {
    fixture: LINKCHECK,
    source: { kind: 'provider', endpoint: addEndpoint(PROVIDERS, endpointOf(api, server, KEY_ENV)), model: 'test-model' },
    backend: 'docker',
    approver: 'policy:approve-writable',
    ...overrides,
  };
}

const run = (input: RunInput, opts?: RunOnceOptions) => runOnce(env, input, { providersFile: PROVIDERS, ...opts });
const error = (status: number, body: unknown, headers: Record<string, string> = {}): Scripted => ({ status, body, headers });
const openaiError = (code: string, message: string) => ({ error: { message, type: code, code } });

describe.each(['openai', 'anthropic'] as const)('the canonical fixture solved through the %s SDK', (api) => {
  it('completes on the docker backend with approvals sent as real Signals, usage counted, the key sent only to the provider', async () => {
    const server = await serve(session(api));
    const { outcome, trace, handle } = await run(liveInput(api, server, { approver: 'interactive' }), { drive: (h) => approveAll(h) });
    expect(outcome.record).toEqual({
      ...CANONICAL_RECORD,
      replay: null,
      turns: 7,
      usage: { model_calls: 7, input_tokens: 700, output_tokens: 140, cached_tokens: 0, cost_usd: null },
      prompt: CURRENT_PROMPT,
    });
    expect(server.count()).toBe(CANONICAL_REQUESTS);
    expect(trace.filter((e) => e.type === 'approval_recorded').map((e) => (e.data as { principal: string }).principal)).toEqual([
      'user:test',
      'user:test',
    ]);
    const auth = server.requests.map((r) =>
      api === 'openai' ? r.headers.authorization : (r.headers['x-api-key'] ?? r.headers.authorization),
    );
    expect(new Set(auth)).toEqual(new Set([api === 'openai' ? `Bearer ${KEY}` : auth[0]]));
    expect(String(auth[0])).toContain(KEY);
    // Payloads decoded: the history's JSON shows them base64-encoded.
    const history = await historyJson(env.address, handle.workflowId);
    expect(history).toContain(handle.workflowId);
    expect(history).not.toContain(KEY);
  });

  it('answers every call in the next request, and two calls of one reply together (one of them bad)', async () => {
    const calls: ReplyCall[] = [
      { id: 'read-a', name: 'read_file', arguments: { path: 'src/linkcheck.py', start: 1, end: 3 } },
      { id: 'bad-b', name: 'read_file', arguments: { path: 'src/linkcheck.py', start: 0 } },
    ];
    const server = await serve(session(api, { body: reply(api, { calls }) }));
    const { outcome, trace } = await run(liveInput(api, server));
    expect(outcome.record).toMatchObject({ status: 'completed', writes: 2, tool_errors: { invalid_fields: 1, tests_failed: 1 } });
    expect(server.count()).toBe(CANONICAL_REQUESTS + 1);
    const second = server.requests[1].body;
    if (api === 'anthropic') {
      const results = second.messages.at(-1).content.filter((b: { type: string }) => b.type === 'tool_result');
      expect(results.map((b: { tool_use_id: string; is_error?: boolean }) => [b.tool_use_id, b.is_error ?? false])).toEqual([
        ['read-a', false],
        ['bad-b', true],
      ]);
    } else {
      expect(second.messages.slice(-2).map((m: { role: string; tool_call_id: string }) => [m.role, m.tool_call_id])).toEqual([
        ['tool', 'read-a'],
        ['tool', 'bad-b'],
      ]);
    }
    expect(
      trace.filter((e) => e.type === 'tool_observed' && e.call_id === 'bad-b').map((e) => (e.data as { error: string }).error),
    ).toEqual(['invalid_fields']);
  });
});

describe('provider failures, each with its exact outcome and request count', () => {
  it('waits as told by retry-after on a 429, then goes on: one retry', async () => {
    const server = await serve(session('openai', error(429, openaiError('rate_limit_exceeded', 'slow down'), { 'retry-after': '1' })));
    const { outcome, trace } = await run(liveInput('openai', server));
    expect(outcome.record).toMatchObject({ status: 'completed', writes: 2 });
    expect(server.count()).toBe(CANONICAL_REQUESTS + 1);
    expect(trace.filter((e) => e.type === 'model_retry').map((e) => e.data)).toEqual([
      expect.objectContaining({ attempt: 1, delay_ms: 1000 }),
    ]);
  });

  it('does not retry a 429 insufficient_quota: failed / model_error after one request', async () => {
    const server = await serve(session('openai', error(429, openaiError('insufficient_quota', 'You exceeded your current quota'))));
    const { outcome } = await run(liveInput('openai', server));
    expect(outcome.record).toMatchObject({ status: 'failed', reason: 'model_error', writes: 0 });
    expect(outcome.state.detail).toContain('insufficient_quota');
    expect(server.count()).toBe(1);
  });

  it('retries a 500 (Anthropic 529 alike) and completes', async () => {
    const server = await serve(session('anthropic', error(500, { type: 'error', error: { type: 'api_error', message: 'boom' } })));
    const { outcome } = await run(liveInput('anthropic', server));
    expect(outcome.record).toMatchObject({ status: 'completed', writes: 2 });
    expect(server.count()).toBe(CANONICAL_REQUESTS + 1);
    expect(outcome.state.counters.model_retries).toBe(1);
  });

  it('fails at once on a 400: exactly one request', async () => {
    const server = await serve(
      session('anthropic', error(400, { type: 'error', error: { type: 'invalid_request_error', message: 'bad request' } })),
    );
    const { outcome } = await run(liveInput('anthropic', server));
    expect(outcome.record).toMatchObject({ status: 'failed', reason: 'model_error', writes: 0 });
    expect(server.count()).toBe(1);
  });

  it('times out a response that never arrives, aborts it and retries', async () => {
    const server = await serve(session('openai', { hang: true }));
    const { outcome } = await run(liveInput('openai', server), { modelTimeoutMs: 1500 });
    expect(outcome.record).toMatchObject({ status: 'completed', writes: 2 });
    expect(server.count()).toBe(CANONICAL_REQUESTS + 1);
    expect(server.aborted).toBe(1);
  });

  it('answers malformed JSON arguments and an unknown or mis-cased tool name, and goes on', async () => {
    const server = await serve(
      session(
        'openai',
        { body: reply('openai', { calls: [{ id: 'broken', name: 'read_file', arguments: '{"path": "src/linkcheck.py"' }] }) },
        { body: reply('openai', { calls: [{ id: 'cased', name: 'Read_File', arguments: { path: 'src/linkcheck.py' } }] }) },
      ),
    );
    const { outcome, trace } = await run(liveInput('openai', server));
    expect(outcome.record).toMatchObject({
      status: 'completed',
      writes: 2,
      tool_errors: { invalid_fields: 1, unknown_tool: 1, tests_failed: 1 },
    });
    expect(server.count()).toBe(CANONICAL_REQUESTS + 2);
    const observed = (id: string) => trace.find((e) => e.type === 'tool_observed' && e.call_id === id)!.data as { error: string };
    expect([observed('broken').error, observed('cased').error]).toEqual(['invalid_fields', 'unknown_tool']);
  });

  it('ends model_error after more than three malformed calls in a row', async () => {
    const bad = (i: number): Scripted => ({ body: reply('openai', { calls: [{ id: `bad-${i}`, name: 'nope', arguments: {} }] }) });
    const server = await serve(session('openai', bad, bad, bad, bad, bad));
    const { outcome } = await run(liveInput('openai', server));
    expect(outcome.record).toMatchObject({ status: 'failed', reason: 'model_error', writes: 0, tool_errors: { unknown_tool: 4 } });
    expect(server.count()).toBe(4);
  });

  it.each(['openai', 'anthropic'] as const)('never runs a call of a reply cut off by the output limit (%s)', async (api) => {
    const cut = reply(api, {
      calls: [{ id: 'partial', name: 'apply_patch', arguments: { path: 'src/linkcheck.py' } }],
      finish: 'length',
      stop: 'max_tokens',
    });
    const server = await serve(session(api, { body: cut }));
    const { outcome, trace } = await run(liveInput(api, server));
    expect(outcome.record).toMatchObject({ status: 'completed', writes: 2 });
    expect(server.count()).toBe(CANONICAL_REQUESTS + 1);
    expect(trace.some((e) => e.call_id === 'partial')).toBe(false);
    expect(trace.filter((e) => e.type === 'model_retry')).toHaveLength(1);
    expect(JSON.stringify(server.requests[1].body)).toContain('cut off by the output limit');
  });

  it.each([
    ['openai', reply('openai', { refusal: 'I cannot help with that' })],
    ['openai', reply('openai', { text: '', finish: 'content_filter' })],
    ['anthropic', reply('anthropic', { text: 'no', stop: 'refusal' })],
  ] as const)('ends a refusal or a content filter (%s) failed / model_refused after one request', async (api, body) => {
    const server = await serve(session(api, { body }));
    const { outcome } = await run(liveInput(api, server));
    expect(outcome.record).toMatchObject({ status: 'failed', reason: 'model_refused', writes: 0 });
    expect(server.count()).toBe(1);
  });

  it('takes an empty reply as final, which the verifier then rejects', async () => {
    const server = await serve(session('anthropic', { body: reply('anthropic', {}) }));
    const { outcome } = await run(liveInput('anthropic', server));
    expect(outcome.record).toMatchObject({ status: 'failed', reason: 'verification_failed', writes: 0 });
    expect(server.count()).toBe(1);
  });

  it('prices usage from the configured table, cached input at its own price, and leaves an unpriced model at null', async () => {
    const prices = join(tempDir('prices'), 'prices.json');
    writeFileSync(prices, JSON.stringify({ 'priced-model': { input: 3, output: 15, cached_input: 0.3 } }));
    process.env.AGENT_PRICES_FILE = prices;
    try {
      const server = await serve((_req, i) => ({
        body: reply('anthropic', { ...(CANONICAL_REPLIES[i] ?? { text: 'done' }), usage: [1000, 200, 400] }),
      }));
      const base = liveInput('anthropic', server);
      const { outcome } = await run({ ...base, source: { ...(base.source as object), model: 'priced-model' } as RunInput['source'] });
      // Per call: 600 fresh input tokens at $3, 400 cached at $0.30, 200 output at $15 per million.
      const perCall = (600 * 3 + 400 * 0.3 + 200 * 15) / 1e6;
      expect(outcome.record.usage).toEqual({
        model_calls: 7,
        input_tokens: 7000,
        output_tokens: 1400,
        cached_tokens: 2800,
        cost_usd: expect.closeTo(7 * perCall, 12),
      });
      const unpriced = await run(liveInput('anthropic', await serve(session('anthropic'))));
      expect(unpriced.outcome.record.usage).toMatchObject({ model_calls: 7, cost_usd: null });
    } finally {
      delete process.env.AGENT_PRICES_FILE;
    }
  });

  it('stops at max_model_tokens with budget_exhausted', async () => {
    const server = await serve(session('openai'));
    const { outcome } = await run(liveInput('openai', server, { budgets: { max_model_tokens: 300 } }));
    expect(outcome.record).toMatchObject({
      status: 'budget_exhausted',
      reason: 'max_model_tokens',
      usage: { model_calls: 3, input_tokens: 300, output_tokens: 60 },
    });
    expect(server.count()).toBe(3);
  });

  it('compacts and tries once more when the context does not fit the window', async () => {
    const overflow = error(400, openaiError('context_length_exceeded', "This model's maximum context length is 128 tokens"));
    const server = await serve(session('openai', overflow));
    const { outcome } = await run(liveInput('openai', server));
    expect(outcome.record).toMatchObject({ status: 'completed', writes: 2 });
    expect(server.count()).toBe(CANONICAL_REQUESTS + 1);
    expect(outcome.state.counters.model_retries).toBe(0);
  });

  it('aborts the HTTP request of a cancelled run', async () => {
    const server = await serve(session('openai', { hang: true }));
    const { outcome, trace } = await run(liveInput('openai', server), {
      drive: async (h) => {
        await waitFor('the request to arrive', async () => server.count() === 1);
        await h.cancel();
      },
    });
    expect(outcome.record).toMatchObject({ status: 'cancelled', reason: 'cancelled' });
    await waitFor('the server to see the request aborted', async () => server.aborted === 1, 15_000);
    expect(server.count()).toBe(1);
    expect(trace.at(-1)).toMatchObject({ type: 'run_finished' });
  });
});

describe('paid once', () => {
  it('a worker killed after the provider answered is retried from the stored response: one request per turn, one write per action, no key anywhere', async () => {
    const server = await serve(session('anthropic'));
    const stateDir = tempDir('paid-once');
    const taskQueue = uniqueQueue('paid-once');
    const logFile = join(stateDir, 'worker.log');
    const handle = await startRun(env.client, liveInput('anthropic', server), { taskQueue, workflowId: `${taskQueue}-run` });
    // The first worker stores the first response and dies; the second finishes the run.
    const first = spawnWorker(env, taskQueue, stateDir, { AGENT_FAULT: 'after_model_response', AGENT_PROVIDERS_FILE: PROVIDERS });
    const log = createWriteStream(logFile);
    first.stderr!.pipe(log, { end: false });
    await killed(first);
    expect(first.signalCode).toBe('SIGKILL');
    expect(server.count()).toBe(1);
    const second = spawnWorker(env, taskQueue, stateDir, { AGENT_PROVIDERS_FILE: PROVIDERS });
    second.stderr!.pipe(log, { end: false });
    try {
      const outcome = (await handle.result()) as RunOutcome;
      expect(outcome.record).toMatchObject({ status: 'completed', writes: 2, receipts: 2, usage: { model_calls: 7 } });
      expect(server.count()).toBe(CANONICAL_REQUESTS);
      const writes = traceIn(stateDir, handle.firstExecutionRunId).filter((e) => e.type === 'action_written');
      expect(writes.map((e) => (e.data as { path: string }).path)).toEqual(['tests/test_agent_nested.py', 'src/linkcheck.py']);
    } finally {
      second.kill('SIGTERM');
      await killed(second);
      log.end();
    }
    await expectNoKey(handle, stateDir);
  });
});

/** The key-leak grep: the whole history, the store, every file of the state folder, the worker log. */
async function expectNoKey(handle: WorkflowHandle, stateDir: string): Promise<void> {
  const history = await historyJson(env.address, handle.workflowId);
  expect(history.length).toBeGreaterThan(1000);
  const hits: string[] = history.includes(KEY) ? ['history'] : [];
  const walk = (dir: string) => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      const st = statSync(path, { throwIfNoEntry: false });
      if (!st) continue;
      if (st.isDirectory()) walk(path);
      else if (st.isFile() && readFileSync(path).includes(KEY)) hits.push(path.slice(stateDir.length));
    }
  };
  walk(stateDir);
  expect(existsSync(join(stateDir, 'store.sqlite'))).toBe(true);
  expect(existsSync(join(stateDir, 'worker.log'))).toBe(true);
  expect(hits).toEqual([]);
}

describe('a live session becomes a regression fixture', () => {
  it('export-replay of a live run re-runs on the local backend to the same status, writes and diff paths', async () => {
    const server = await serve(session('openai', { body: reply('openai', { calls: [{ id: 'typo', name: 'read_fil', arguments: {} }] }) }));
    const live = await run(liveInput('openai', server));
    expect(live.outcome.record.status).toBe('completed');
    const store = new Store(join(live.stateDir, 'store.sqlite'));
    const replay = exportReplay(store, live.outcome.transcript);
    store.close();
    const file = join(tempDir('exported'), 'exported.json');
    writeFileSync(file, JSON.stringify(replay));
    const again = await run({
      fixture: LINKCHECK,
      source: { kind: 'replay', path: file, trusted: true },
      backend: 'local',
      approver: 'policy:approve-writable',
    });
    const pick = (r: RunOutcome['record']) => ({
      status: r.status,
      writes: r.writes,
      receipts: r.receipts,
      diff_paths: r.diff_paths,
      tool_errors: r.tool_errors,
    });
    expect(pick(again.outcome.record)).toEqual(pick(live.outcome.record));
    expect(again.outcome.record.usage).toBeUndefined();
  });
});

describe('long live sessions', () => {
  it('keeps every history payload under 64 KiB and every request under the context budget over 60 turns of large results', async () => {
    const fixture = join(tempDir('big-live'), 'fixture');
    cpSync(LINKCHECK, fixture, { recursive: true });
    const config = JSON.parse(readFileSync(join(fixture, 'fixture.json'), 'utf8'));
    writeFileSync(
      join(fixture, 'fixture.json'),
      JSON.stringify({ ...config, budgets: { ...config.budgets, max_turns: 70, max_tool_calls: 70 } }),
    );
    writeFileSync(
      join(fixture, 'repo', 'notes.txt'),
      Array.from({ length: 1500 }, (_, i) => `line ${i}: ${'y'.repeat(40)}`).join('\n') + '\n',
    );
    const BUDGET = 12_000;
    let reads = 0;
    const server = await serve((req) => {
      if (reads < 59) {
        reads++;
        return { body: reply('openai', { calls: [{ id: `big-${reads}`, name: 'read_file', arguments: { path: 'notes.txt' } }] }) };
      }
      return { body: reply('openai', { text: 'done' }) };
    });
    const { outcome, handle } = await run(liveInput('openai', server, { fixture, budgets: { context_budget_tokens: BUDGET } }));
    expect(outcome.record).toMatchObject({ status: 'failed', reason: 'verification_failed' });
    expect(server.count()).toBe(60);
    const biggest = Math.max(...server.requests.map((r) => r.bytes));
    console.log(`60-request live session: largest request ${biggest} bytes (~${Math.ceil(biggest / 4)} tokens; budget ${BUDGET})`);
    expect(Math.ceil(biggest / 4)).toBeLessThanOrEqual(BUDGET);
    expect(JSON.stringify(server.requests.at(-1)!.body)).toContain('history_compaction');
    const history = (
      await exec(
        temporalBinary(SETTINGS),
        ['workflow', 'show', '--address', env.address, '--workflow-id', handle.workflowId, '-o', 'json'],
        {
          maxBuffer: 256 * 1024 * 1024,
        },
      )
    ).stdout;
    const sizes: number[] = [];
    JSON.parse(history, (key, value) => {
      if (key === 'data' && typeof value === 'string') sizes.push(Buffer.from(value, 'base64').length);
      return value;
    });
    expect(Math.max(...sizes)).toBeLessThanOrEqual(64 * 1024);
  });
});

describe('prompt caching', () => {
  const PRICES = { 'cached-model': { input: 3, output: 15, cached_input: 0.3, cache_write_input: 3.75 } };
  const withPrices = async <T>(fn: () => Promise<T>): Promise<T> => {
    const prices = join(tempDir('prices'), 'prices.json');
    writeFileSync(prices, JSON.stringify(PRICES));
    process.env.AGENT_PRICES_FILE = prices;
    try {
      return await fn();
    } finally {
      delete process.env.AGENT_PRICES_FILE;
    }
  };
  const stripMarks = (v: unknown) => JSON.parse(JSON.stringify(v, (k, x) => (k === 'cache_control' ? undefined : x)));

  it('marks the stable prefix for Anthropic, keeps the run state after it, and counts and prices what the cache read and wrote', async () => {
    // Call i: all input, output, read from the cache, written to it.
    const usageOf = (i: number): [number, number, number, number] =>
      i === 0 ? [1000, 200, 0, 800] : [1000 + 100 * i, 200, 800 + 50 * i, 100];
    const server = await serve((_req, i) => ({
      body: reply('anthropic', { ...(CANONICAL_REPLIES[i] ?? { text: 'done' }), usage: usageOf(i) }),
    }));
    const base = liveInput('anthropic', server);
    const { outcome, trace } = await withPrices(() =>
      run({ ...base, source: { ...(base.source as object), model: 'cached-model' } as RunInput['source'] }),
    );
    expect(outcome.record.status).toBe('completed');

    // Usage: all input, of it what was read from the cache; cost with reads and writes at their own prices.
    const calls = Array.from({ length: CANONICAL_REQUESTS }, (_, i) => usageOf(i));
    const sum = (k: number) => calls.reduce((n, u) => n + u[k], 0);
    const cost = calls.reduce(
      (n, [all, out, read, written]) => n + ((all - read - written) * 3 + read * 0.3 + written * 3.75 + out * 15) / 1e6,
      0,
    );
    expect(outcome.record.usage).toEqual({
      model_calls: CANONICAL_REQUESTS,
      input_tokens: sum(0),
      output_tokens: sum(1),
      cached_tokens: sum(2),
      cost_usd: expect.closeTo(cost, 12),
    });
    expect(outcome.state.prompt_cache).toEqual({ hits: CANONICAL_REQUESTS - 1, write_tokens: sum(3) });
    const usage = trace
      .filter((e) => e.type === 'model_usage')
      .map((e) => e.data as { cache_hit: boolean; cached_tokens: number; cache_write_tokens: number });
    expect(usage.map((u) => [u.cache_hit, u.cached_tokens, u.cache_write_tokens])).toEqual(
      calls.map(([, , read, written]) => [read > 0, read, written]),
    );

    // Every request: the system prompt (after the tools), the task and its rules, and the conversation so far are marked; the run state comes last.
    type Block = { type: string; text?: string; cache_control?: unknown };
    const bodies = server.requests.map((r) => r.body as { system: Block[]; messages: { role: string; content: Block[] }[] });
    for (const [i, body] of bodies.entries()) {
      const marked = body.messages.flatMap((m) => m.content).filter((b) => b.cache_control !== undefined);
      expect(body.system).toEqual([expect.objectContaining({ cache_control: { type: 'ephemeral' } })]);
      expect(body.messages[0].content[0]).toMatchObject({
        type: 'text',
        cache_control: { type: 'ephemeral' },
        text: expect.stringMatching(/^Task: /),
      });
      expect(marked.length).toBe(i === 0 ? 1 : 2);
      const last = body.messages.at(-1)!.content.at(-1)!;
      expect(last).toEqual({ type: 'text', text: expect.stringMatching(/^## Run state/) });
      expect(JSON.stringify(body.messages.slice(0, -1))).not.toContain('## Run state');
    }
    // Each request repeats the previous one's cached prefix byte for byte: only the marks move.
    for (let i = 1; i < bodies.length; i++) {
      const prefix = stripMarks(bodies[i - 1].messages);
      prefix.at(-1).content.pop(); // the run state
      const next = stripMarks(bodies[i].messages);
      expect(next.slice(0, prefix.length - 1)).toEqual(prefix.slice(0, -1));
      expect(next[prefix.length - 1].content.slice(0, prefix.at(-1).content.length)).toEqual(prefix.at(-1).content);
      expect(stripMarks(bodies[i].system)).toEqual(stripMarks(bodies[0].system));
    }
  });

  it('sends OpenAI one prompt_cache_key for every request of a run, and counts and prices the cached input', async () => {
    const server = await serve((_req, i) => ({
      body: reply('openai', { ...(CANONICAL_REPLIES[i] ?? { text: 'done' }), usage: [2000, 100, i === 0 ? 0 : 1536] }),
    }));
    const base = liveInput('openai', server);
    const { outcome, trace } = await withPrices(() =>
      run({ ...base, source: { ...(base.source as object), model: 'cached-model' } as RunInput['source'] }),
    );
    expect(outcome.record.status).toBe('completed');
    const cached = 1536 * (CANONICAL_REQUESTS - 1);
    const cost = (CANONICAL_REQUESTS * 2000 * 3 - cached * 3 + cached * 0.3 + CANONICAL_REQUESTS * 100 * 15) / 1e6;
    expect(outcome.record.usage).toEqual({
      model_calls: CANONICAL_REQUESTS,
      input_tokens: 2000 * CANONICAL_REQUESTS,
      output_tokens: 100 * CANONICAL_REQUESTS,
      cached_tokens: cached,
      cost_usd: expect.closeTo(cost, 12),
    });
    expect(outcome.state.prompt_cache).toEqual({ hits: CANONICAL_REQUESTS - 1, write_tokens: 0 });
    expect(trace.filter((e) => e.type === 'model_usage').map((e) => (e.data as { cache_hit: boolean }).cache_hit)).toEqual([
      false,
      ...new Array(CANONICAL_REQUESTS - 1).fill(true),
    ]);
    const keys = new Set(server.requests.map((r) => r.body.prompt_cache_key));
    expect(keys.size).toBe(1);
    expect([...keys][0]).toMatch(/^coding-agent:v1:[0-9a-f]{24}$/);
    // The first user message starts with the task and its rules; the run state follows them.
    for (const r of server.requests) expect(r.body.messages[1].content).toMatch(/^Task: [\s\S]*\n\n## Run state/);
  });
});

describe('prompt versions of a live run', () => {
  it('records the version and digest in the record and every model_requested event; an edited file or a newer version changes them', async () => {
    const dir = join(tempDir('prompts'), 'prompts');
    cpSync(join(PROJECT_ROOT, 'prompts'), dir, { recursive: true });
    const systemOf = (body: { system: unknown }) => JSON.stringify(body.system);
    const live = async (overrides: Partial<RunInput> = {}) => {
      const server = await serve(session('anthropic'));
      const result = await run(liveInput('anthropic', server, overrides), { promptsDir: dir });
      const requested = result.trace
        .filter((e) => e.type === 'model_requested')
        .map((e) => e.data as { prompt_version?: string; prompt_digest?: string });
      return { record: result.outcome.record, requested, bodies: server.requests.map((r) => r.body) };
    };

    const first = await live();
    expect(first.record).toMatchObject({ status: 'completed', prompt: CURRENT_PROMPT });
    expect(first.requested.length).toBe(CANONICAL_REQUESTS);
    for (const e of first.requested) expect(e).toMatchObject({ prompt_version: 'v1', prompt_digest: CURRENT_PROMPT.digest });

    // An edited v1: the same version, another digest, and the requests carry the new text.
    writeFileSync(
      join(dir, 'v1', 'system.md'),
      `${readFileSync(join(dir, 'v1', 'system.md'), 'utf8')}Prefer the smallest change that makes the tests pass.\n`,
    );
    const edited = await live();
    expect(edited.record.prompt).toEqual({ version: 'v1', digest: expect.not.stringMatching(CURRENT_PROMPT.digest) });
    for (const e of edited.requested)
      expect(e).toEqual(expect.objectContaining({ prompt_version: 'v1', prompt_digest: edited.record.prompt!.digest }));
    for (const body of edited.bodies) expect(systemOf(body)).toContain('Prefer the smallest change');

    // A newer version becomes the default; a run that names v1 keeps it.
    cpSync(join(PROJECT_ROOT, 'prompts', 'v1'), join(dir, 'v2'), { recursive: true });
    writeFileSync(join(dir, 'v2', 'system.md'), 'You are a coding agent. Propose tool calls; the harness decides.\n');
    const newest = await live();
    expect(newest.record.prompt).toMatchObject({ version: 'v2' });
    expect(new Set([CURRENT_PROMPT.digest, edited.record.prompt!.digest, newest.record.prompt!.digest]).size).toBe(3);
    for (const body of newest.bodies) expect(systemOf(body)).toContain('the harness decides');
    const named = await live({ prompt: 'v1' });
    expect(named.record.prompt).toEqual(edited.record.prompt);

    // A version the worker lacks: refused before any request.
    const server = await serve(session('anthropic'));
    const { outcome } = await run(liveInput('anthropic', server, { prompt: 'v7' }), { promptsDir: dir });
    expect(outcome.record).toMatchObject({ status: 'failed', reason: 'invalid_input' });
    expect(outcome.state.detail).toBe('prompt version v7 does not exist; the worker has v1, v2');
    expect(server.count()).toBe(0);
  });
});

describe('golden request bodies', () => {
  it.each(['openai', 'anthropic'] as const)(
    'sends exactly the recorded tool definitions and request bodies for the canonical session (%s)',
    async (api) => {
      const server = await serve(session(api));
      const { outcome } = await run(liveInput(api, server));
      expect(outcome.record.status).toBe('completed');
      // Test output timings and action ids (digests over the run id) vary between runs; everything else is fixed.
      const normalized = JSON.stringify(server.requests.map((r) => r.body))
        .replace(/in \d+\.\d+s/g, 'in N.NNs')
        .replace(/\\"action_id\\":\\"[0-9a-f]{64}\\"/g, '\\"action_id\\":\\"ACTION\\"');
      const bodies = JSON.parse(normalized);
      const file = join(PROJECT_ROOT, 'tests', 'golden', `${api}-canonical.json`);
      if (process.env.UPDATE_GOLDEN === '1') {
        mkdirSync(join(PROJECT_ROOT, 'tests', 'golden'), { recursive: true });
        writeFileSync(file, `${JSON.stringify(bodies, null, 2)}\n`);
      }
      expect(bodies).toEqual(JSON.parse(readFileSync(file, 'utf8')));
    },
  );
});
