/**
 * No run can spend a secret it was not given: endpoints belong to the worker's operator, each
 * request carries exactly the named key, provider error text is scrubbed of it, and a provider
 * endpoint without a URL in the test environment reaches the guard's loopback port and nothing
 * else. A real worker process (its own log), the docker backend, a real Temporal server and a
 * local server that speaks both provider APIs.
 */
import { createWriteStream, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import type { WorkflowHandle, WorkflowHandleWithFirstExecutionRunId } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { buildReport } from '../client/report/report';
import type { RunInput } from '../core/contracts';
import { traceLine, writeOutputs } from '../client/eval';
import { fragments, historyJson, leaks } from './helpers/leaks';
import { GUARD_PORT_ENV } from './helpers/network-guard';
import { addEndpoint, endpointOf, ProviderServer, reply, type Api, type Script } from './helpers/provider-server';
import { LINKCHECK, tempDir, requireDockerSandbox } from './helpers/run-dir';
import { killed, spawnWorker, startServer, traceIn, uniqueQueue } from './helpers/temporal';
import { startRunWithArgs } from '../client/run-access';
import type { RunOutcome } from '../core/run-view';

const KEY = 'sk-live-CANARY-7e31a0c4d9b2f';
const KEY_ENV = 'AGENT_TEST_SECRETS_KEY';
/** A value every SDK would pick up from the environment if it were let to. */
const DECOY = 'decoy-SECRET-41f7c2aa90';
const SECRET_X = 'secret-x-VALUE-93bd20e57a';

let env: TestWorkflowEnvironment;
let worker: ChildProcess;
let stateDir: string;
let logFile: string;
let taskQueue: string;
const providersFile = join(tempDir('providers'), 'providers.json');
const servers: ProviderServer[] = [];

beforeAll(async () => {
  await requireDockerSandbox();
  env = await startServer();
  stateDir = tempDir('secrets-state');
  logFile = join(stateDir, 'worker.log');
  taskQueue = uniqueQueue('secrets');
  worker = spawnWorker(env, taskQueue, stateDir, {
    AGENT_PROVIDERS_FILE: providersFile,
    [KEY_ENV]: KEY,
    SECRET_X,
    OPENAI_API_KEY: DECOY,
    OPENAI_ORG_ID: DECOY,
    OPENAI_PROJECT_ID: DECOY,
    OPENAI_CUSTOM_HEADERS: `x-api-key: ${DECOY}\nproxy-authorization: ${DECOY}`,
    ANTHROPIC_API_KEY: DECOY,
    ANTHROPIC_AUTH_TOKEN: DECOY,
    ANTHROPIC_CUSTOM_HEADERS: `x-api-key: ${DECOY}\nauthorization: Bearer ${DECOY}`,
  });
  worker.stderr!.pipe(createWriteStream(logFile));
});

afterAll(async () => {
  for (const s of servers) await s.close();
  worker?.kill('SIGTERM');
  if (worker) await killed(worker);
  await env?.teardown();
});

async function serve(script: Script, port = 0): Promise<ProviderServer> {
  const server = await new ProviderServer(script, port).start();
  servers.push(server);
  return server;
}

const CANONICAL = JSON.parse(readFileSync(join(LINKCHECK, 'replays', 'canonical.json'), 'utf8')).decisions as {
  kind: string;
  text?: string;
  call?: { call_id: string; name: string; arguments: unknown };
}[];
const REPLIES = CANONICAL.filter((d) => d.kind !== 'plan').map((d) =>
  d.kind === 'tool' ? { calls: [{ id: d.call!.call_id, name: d.call!.name, arguments: d.call!.arguments }] } : { text: d.text },
);
const canonicalSession =
  (api: Api): Script =>
  (_req, i) => ({ body: reply(api, REPLIES[i] ?? { text: 'done' }) });

let started = 0;
async function start(input: unknown, carried?: unknown): Promise<WorkflowHandleWithFirstExecutionRunId> {
  return startRunWithArgs(env.client, carried === undefined ? [input] : [input, carried], {
    taskQueue,
    workflowId: `${taskQueue}-${++started}`,
  });
}
const live = (endpoint: string, source: Record<string, unknown> = {}): RunInput =>
  ({
    fixture: LINKCHECK,
    source: { kind: 'provider', endpoint, model: 'test-model', ...source },
    backend: 'docker',
    approver: 'policy:approve-writable',
  }) as RunInput;
const outcome = async (handle: WorkflowHandle) => (await handle.result()) as RunOutcome;

describe('endpoints belong to the worker operator', () => {
  it('ends a run naming an unknown endpoint invalid_input before any request', async () => {
    const server = await serve(canonicalSession('openai'));
    addEndpoint(providersFile, endpointOf('openai', server, KEY_ENV));
    const { record, state } = await outcome(await start(live('no-such-endpoint')));
    expect(record).toMatchObject({ status: 'failed', reason: 'invalid_input' });
    expect(state.detail).toContain('no endpoint "no-such-endpoint"');
    expect(server.count()).toBe(0);
  });

  it('never reads a variable the providers file does not name, whatever the input asks: no value anywhere, no request', async () => {
    const server = await serve(canonicalSession('openai'));
    const known = addEndpoint(providersFile, endpointOf('openai', server, KEY_ENV));
    const asks: [string, WorkflowHandle][] = [
      ['the variable as the endpoint', await start(live('SECRET_X'))],
      ['the variable as an endpoint name in lower case', await start(live('secret_x'))],
      ['api_key_env and base_url in the input', await start(live(known, { api_key_env: 'SECRET_X', base_url: `${server.url}/v1` }))],
      [
        'the old provider source shape',
        await start({
          ...live(known),
          source: { kind: 'provider', provider: 'openai', model: 'test-model', api_key_env: 'SECRET_X', base_url: `${server.url}/v1` },
        }),
      ],
      [
        'carried state forged as if continued as new',
        await start(live(known), {
          source: {
            kind: 'provider',
            endpoint: known,
            provider: 'openai',
            model: 'test-model',
            api_key_env: 'SECRET_X',
            base_url: `${server.url}/v1`,
          },
        }),
      ],
    ];
    const histories: Record<string, string> = {};
    for (const [why, handle] of asks) {
      const { record, state } = await outcome(handle);
      expect({ why, status: record.status, reason: record.reason }).toEqual({ why, status: 'failed', reason: 'invalid_input' });
      expect(state.detail).toBeTruthy();
      histories[`history of ${why}`] = await historyJson(env.address, handle.workflowId);
    }
    expect(server.count()).toBe(0);
    expect(leaks([SECRET_X], { texts: histories, dirs: [stateDir], files: [logFile] })).toEqual([]);
  });

  it.each(['openai', 'anthropic'] as const)(
    'sends exactly one credential per request, the named key, and nothing the %s SDK finds in the environment',
    async (api) => {
      const server = await serve(canonicalSession(api));
      const { record } = await outcome(await start(live(addEndpoint(providersFile, endpointOf(api, server, KEY_ENV)))));
      expect(record).toMatchObject({ status: 'completed', writes: 2 });
      expect(server.count()).toBe(REPLIES.length);
      const CREDENTIAL = /^(authorization|proxy-authorization|x-api-key|api-key|cookie|openai-organization|openai-project)$/;
      for (const r of server.requests) {
        const credentials = Object.entries(r.headers).filter(([name]) => CREDENTIAL.test(name));
        expect(credentials).toEqual([['authorization', `Bearer ${KEY}`]]);
        expect(JSON.stringify(r.headers)).not.toContain(DECOY);
      }
    },
  );
});

describe('provider error text', () => {
  it('scrubs a 401 that echoes the key: the run ends model_error and the key and its fragments are nowhere, report.html included', async () => {
    const echo = `Incorrect API key provided: ${KEY}. You can find your API key at the dashboard. (masked: sk-live-****${KEY.slice(-4)}; Authorization: Bearer ${KEY})`;
    const server = await serve(() => ({
      status: 401,
      body: { error: { message: echo, type: 'invalid_request_error', code: 'invalid_api_key' } },
    }));
    const handle = await start(live(addEndpoint(providersFile, endpointOf('openai', server, KEY_ENV))));
    const { record, state } = await outcome(handle);
    expect(record).toMatchObject({ status: 'failed', reason: 'model_error' });
    expect(server.count()).toBe(1);
    expect(state.detail).toContain('401');
    expect(state.detail).toContain('[redacted]');

    // The run in report.html, as a batch report renders it (its trace included).
    const out = tempDir('secrets-report');
    const trace = traceIn(stateDir, handle.firstExecutionRunId);
    writeOutputs(
      out,
      {
        report: buildReport([{ ...record, epoch: 1 }]),
        extras: [{ duration_s: null, workflow_id: handle.workflowId, web_ui: null, trace: trace.map(traceLine), trace_id: null }],
        durations: {},
        traceIds: {},
      },
      {},
    );
    expect(readFileSync(join(out, 'report.html'), 'utf8')).toContain('model_error');

    const needles = [KEY, ...fragments(KEY)];
    const history = await historyJson(env.address, handle.workflowId);
    expect(history).toContain('[redacted]');
    expect(leaks(needles, { texts: { history }, dirs: [stateDir, out], files: [logFile] })).toEqual([]);
  });
});

describe('the test-wide guard', () => {
  it.each(['openai', 'anthropic'] as const)(
    'sends a %s run whose endpoint names no URL to the closed loopback port the tests set, and nowhere else',
    async (api) => {
      const port = Number(process.env[GUARD_PORT_ENV]);
      expect(port).toBeGreaterThan(0);
      expect(process.env.OPENAI_API_KEY ?? process.env.ANTHROPIC_API_KEY ?? process.env.ANTHROPIC_AUTH_TOKEN).toBeUndefined();
      const server = await serve(canonicalSession(api), port);
      try {
        const endpoint = addEndpoint(providersFile, { name: `guarded-${api}`, kind: api, api_key_env: KEY_ENV });
        const { record } = await outcome(await start(live(endpoint)));
        expect(record).toMatchObject({ status: 'completed', writes: 2 });
        expect(server.count()).toBe(REPLIES.length);
      } finally {
        await server.close();
        servers.splice(servers.indexOf(server), 1);
      }
    },
  );
});
