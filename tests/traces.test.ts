/**
 * Traces of runs, exported over OTLP/HTTP to a local receiver (scripts/support/otlp-receiver.ts):
 * the canonical run started by `npm run agent -- run` against a real worker process, both with
 * OTEL_EXPORTER_OTLP_ENDPOINT set, is one trace: the command's start span, the workflow span and
 * one span per activity (each activity of the history found once), with the run's attributes; its
 * trace id is in `run --wait --json`, `status --json`, the status text and the console's card. A batch gives each run
 * a trace of its own, named in timings.json and report.html and absent from report.json. A live run
 * puts the model's token counts on its decide spans and the run's totals on the workflow span.
 */
import { execFile, type ChildProcess } from 'node:child_process';
import { cpSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import type { WorkflowHandle } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode, Worker } from '@temporalio/worker';
import { quietLogger, workflowBundle, workflowBundleOptions, type BundleKind } from '../worker';
import type { RunRecord } from '../core/contracts';
import { workerTelemetry } from '../worker/telemetry';
import { launchChromium } from './helpers/browser';
import { LINKCHECK, PROJECT_ROOT, tempDir } from './helpers/run-dir';
import { OtlpReceiver, type ReceivedSpan } from '../scripts/support/otlp-receiver';
import { addEndpoint, endpointOf, ProviderServer, reply } from './helpers/provider-server';
import {
  approveAll,
  CANONICAL_RECORD,
  canonicalInput,
  inProcessWorker,
  killed,
  pendingApproval,
  runOnce,
  spawnWorker,
  startServer,
  uniqueQueue,
  waitFor,
} from './helpers/temporal';
import { queryState, runOutcome, startRun } from '../client/run-access';
import { cardPage } from '../client/console/pages';

const exec = promisify(execFile);
const CLI = join(PROJECT_ROOT, 'dist', 'client', 'cli.js');
const TRACE_ID = /^[0-9a-f]{32}$/;
const ACTION_ID = /^[0-9a-f]{64}$/;

let env: TestWorkflowEnvironment;
let receiver: OtlpReceiver;
beforeAll(async () => {
  env = await startServer();
  receiver = await new OtlpReceiver().start();
});
afterAll(async () => {
  await receiver?.close();
  await env?.teardown();
});

/** The spans of one activity type in a trace. */
const ofType = (spans: ReceivedSpan[], name: string) => spans.filter((s) => s.name === name);

/** Every activity the history scheduled: its id and type. */
/** Every activity of a run's history: the scheduled ones, and the local ones from their markers. */
async function scheduledActivities(workflowId: string): Promise<{ id: string; type: string }[]> {
  const history = await env.client.workflow.getHandle(workflowId).fetchHistory();
  return (history.events ?? []).flatMap((e) => {
    const a = e.activityTaskScheduledEventAttributes;
    if (a) return [{ id: a.activityId!, type: a.activityType!.name! }];
    const m = e.markerRecordedEventAttributes;
    if (m?.markerName !== 'core_local_activity') return [];
    const data = JSON.parse(Buffer.from(m.details!.data!.payloads![0].data!).toString('utf8')) as {
      activity_id: string;
      activity_type: string;
    };
    return [{ id: data.activity_id, type: data.activity_type }];
  });
}

describe('traces exported over OTLP/HTTP', () => {
  let worker: ChildProcess;
  let cliEnv: NodeJS.ProcessEnv;
  const taskQueue = uniqueQueue('traces');
  const stateDir = tempDir('traces-state');

  beforeAll(() => {
    const telemetry = { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_EXPORTER_OTLP_HEADERS: 'x-receiver-key=test%20key' };
    worker = spawnWorker(env, taskQueue, stateDir, telemetry);
    cliEnv = { ...process.env, TEMPORAL_ADDRESS: env.address, AGENT_TASK_QUEUE: taskQueue, AGENT_STATE_DIR: stateDir, ...telemetry };
  });
  afterAll(async () => {
    worker.kill('SIGTERM');
    await killed(worker);
  });

  const cli = (...args: string[]) =>
    exec(process.execPath, [CLI, ...args], { env: cliEnv, cwd: PROJECT_ROOT, maxBuffer: 16 * 1024 * 1024 });

  it('makes the canonical run one trace: the start span, the workflow span, one span per activity with the run attributes; status names it', async () => {
    const id = `traced-canonical-${process.pid}`;
    const { stdout } = await cli(
      'run',
      'fixtures/linkcheck-nested',
      '--replay',
      'fixtures/linkcheck-nested/replays/canonical.json',
      '--approver',
      'policy:approve-writable',
      '--wait',
      '--json',
      '--id',
      id,
    );
    const record = JSON.parse(stdout);
    expect(record).toEqual({ ...CANONICAL_RECORD, trace_id: expect.stringMatching(TRACE_ID) });
    const traceId = record.trace_id as string;
    const status = await cli('status', id, '--json');
    expect(JSON.parse(status.stdout).trace_id).toBe(traceId);
    expect((await cli('status', id)).stdout).toContain(`trace ${traceId}`);
    // The console's card of the run shows it (the page is made from the same state).
    const card = cardPage(
      { workflow_id: id, view: JSON.parse(status.stdout), trace: [], web_ui: null, csrf: 'c', user: 'u', form_token: 't' },
      null,
    );
    expect(card).toContain(`<dd id="trace-id"><code class="digest">${traceId}</code>`);

    // The worker exports its batches every 2 s, the command line when it ends.
    const activities = await scheduledActivities(id);
    const spans = await waitFor('the run span and a span for every activity at the receiver', async () => {
      const found = receiver.trace(traceId);
      const complete =
        found.some((s) => s.name === 'RunWorkflow:agentRun') &&
        activities.every((a) => found.some((s) => s.attributes.temporalActivityId === a.id && s.name === `RunActivity:${a.type}`));
      return complete ? found : null;
    });
    expect(receiver.refused).toEqual([]);
    expect(receiver.requests.every((r) => r.headers['x-receiver-key'] === 'test key')).toBe(true);

    // The command's start span begins the trace; the workflow span is its child.
    const [start] = ofType(spans, 'StartWorkflow:agentRun');
    expect(start).toMatchObject({ parentSpanId: null, resource: { 'service.name': 'coding-agent-cli' } });
    const runSpans = ofType(spans, 'RunWorkflow:agentRun');
    expect(runSpans).toHaveLength(1);
    const run = runSpans[0];
    expect(run.parentSpanId).toBe(start.spanId);
    expect(run.resource['service.name']).toBe('coding-agent-worker');
    expect(run.attributes).toMatchObject({
      temporalWorkflowId: id,
      'agent.fixture': 'linkcheck-nested',
      'agent.replay': 'canonical',
      'agent.status': 'completed',
      'agent.turns': 8,
      'agent.tool_calls': 6,
      'agent.writes': 2,
      'agent.tool_errors': 1,
    });
    expect(run.attributes['agent.reason']).toBeUndefined();

    // Exactly one span per activity of the history, each under the workflow's start of it.
    const byId = new Map(spans.filter((s) => s.name.startsWith('RunActivity:')).map((s) => [s.attributes.temporalActivityId, s]));
    expect(spans.filter((s) => s.name.startsWith('RunActivity:'))).toHaveLength(activities.length);
    for (const a of activities) {
      const span = byId.get(a.id)!;
      expect({ activity: a.id, name: span.name, workflow: span.attributes.temporalWorkflowId }).toEqual({
        activity: a.id,
        name: `RunActivity:${a.type}`,
        workflow: id,
      });
      const parent = spans.find((s) => s.spanId === span.parentSpanId)!;
      expect(parent.name).toBe(`StartActivity:${a.type}`);
    }
    expect(new Set(activities.map((a) => a.type))).toEqual(
      new Set([
        'loadRun',
        'prepareWorkspace',
        'localDecide',
        'executeTool',
        'preparePatch',
        'writePatch',
        'baselineTests',
        'verify',
        'persist',
      ]),
    );

    // The attributes: the turn of each model call, the tool and call of each tool span, the red
    // run's error code, the action of each write, verification's outcome.
    // A replay's decisions and reads are local activities on the run's host (docs/how-a-run-goes.md).
    const decide = ofType(spans, 'RunActivity:localDecide');
    expect(decide.map((s) => s.attributes['agent.turn']).sort((x, y) => Number(x) - Number(y))).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    // A replay's read-only call runs with its decision: that span names the tool (core/activities.ts, `read_ahead`).
    const readsWithDecision = decide.filter((s) => s.attributes['agent.tool'] !== undefined);
    const tools = [...ofType(spans, 'RunActivity:executeTool'), ...ofType(spans, 'RunActivity:localTool'), ...readsWithDecision].map(
      (s) => [
        s.attributes['agent.turn'],
        s.attributes['agent.tool'],
        s.attributes['agent.call_id'],
        s.attributes['agent.error_code'] ?? null,
      ],
    );
    expect(tools.sort((x, y) => Number(x[0]) - Number(y[0]))).toEqual([
      [2, 'read_file', 'read-source', null],
      [4, 'run_tests', 'run-red', 'tests_failed'],
      [6, 'run_tests', 'run-green', null],
      [7, 'show_diff', 'show-diff', null],
    ]);
    const prepared = ofType(spans, 'RunActivity:preparePatch').map((s) => s.attributes);
    const written = ofType(spans, 'RunActivity:writePatch').map((s) => s.attributes);
    expect(prepared.map((a) => [a['agent.call_id'], a['agent.tool']]).sort()).toEqual([
      ['add-test', 'apply_patch'],
      ['fix-source', 'apply_patch'],
    ]);
    for (const a of [...prepared, ...written]) expect(a['agent.action_id']).toMatch(ACTION_ID);
    expect(new Set(written.map((a) => a['agent.action_id']))).toEqual(new Set(prepared.map((a) => a['agent.action_id'])));
    expect(ofType(spans, 'RunActivity:verify')[0].attributes['agent.outcome']).toBe('passed');
    // The workflow-side start spans say the same of the arguments of the calls that ran as steps of their own.
    expect(
      [...ofType(spans, 'StartActivity:executeTool'), ...ofType(spans, 'StartActivity:localTool')]
        .map((s) => s.attributes['agent.tool'])
        .sort(),
    ).toEqual(['run_tests', 'run_tests']);
    // The run's spans are in this trace only.
    expect(receiver.spans.filter((s) => s.attributes.temporalWorkflowId === id && s.traceId !== traceId)).toEqual([]);

    // Deterministic: the traced run's history replays on the workflow code of both bundles (it throws otherwise).
    const history = await env.client.workflow.getHandle(id).fetchHistory();
    for (const kind of ['traced', 'plain'] as const)
      await Worker.runReplayHistory({ workflowBundle: await workflowBundle(kind), sinks: workerTelemetry(null).sinks }, history, id);
  });

  it('lets a run move between a worker that exports traces and one that does not: each history replays on the other bundle', async () => {
    // An orchestrating run (two tasks in parallel, two merges) on each kind of worker: the traced
    // worker process, and an in-process worker without traces (the plain bundle).
    const id = `traced-subruns-${process.pid}`;
    const args = ['fixtures/py-two-modules', '--replay', 'fixtures/py-two-modules/replays/canonical.json'];
    const { stdout } = await cli('run', ...args, '--approver', 'policy:approve-writable', '--wait', '--json', '--id', id);
    const traced = JSON.parse(stdout) as RunRecord;
    const plain = await runOnce(env, {
      fixture: join(PROJECT_ROOT, args[0]),
      source: { kind: 'replay', path: join(PROJECT_ROOT, args[2]), trusted: true },
      backend: 'local',
      approver: 'policy:approve-writable',
    });
    expect(plain.outcome.record).toMatchObject({ status: 'completed', trace_id: null, subruns: { dispatched: 2, merges: 2 } });
    expect(traced).toMatchObject({ status: 'completed', trace_id: expect.stringMatching(TRACE_ID), subruns: { dispatched: 2, merges: 2 } });
    const histories = async (workflowId: string, tasks: { task_id: string }[]) =>
      Promise.all(
        [workflowId, ...tasks.map((t) => t.task_id)].map(async (w) => ({
          workflowId: w,
          history: await env.client.workflow.getHandle(w).fetchHistory(),
        })),
      );
    const replay = async (kind: BundleKind, runs: Awaited<ReturnType<typeof histories>>) => {
      const errors = [];
      const options = { workflowBundle: await workflowBundle(kind), sinks: workerTelemetry(null).sinks };
      for await (const r of Worker.runReplayHistories(options, runs))
        errors.push({ workflowId: r.workflowId, error: r.error?.message ?? null });
      return errors;
    };
    const tracedRuns = await histories(id, traced.tasks!);
    const plainRuns = await histories(plain.handle.workflowId, plain.outcome.record.tasks!);
    expect(await replay('plain', tracedRuns)).toEqual(tracedRuns.map((r) => ({ workflowId: r.workflowId, error: null })));
    expect(await replay('traced', plainRuns)).toEqual(plainRuns.map((r) => ({ workflowId: r.workflowId, error: null })));
  });

  it('keeps a run its trace id when a worker without traces takes over the run a traced worker parked', async () => {
    const queue = uniqueQueue('traces-handover');
    const state = tempDir('traces-handover-state');
    const traced = spawnWorker(env, queue, state, { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url });
    const handle = await startRun(env.client, canonicalInput('canonical', { approver: 'interactive' }), {
      taskQueue: queue,
      workflowId: `traces-handover-${process.pid}`,
    });
    let traceId: string | null = null;
    try {
      await pendingApproval(handle);
      traceId = (await queryState(handle)).trace_id;
      expect(traceId).toMatch(TRACE_ID);
    } finally {
      traced.kill('SIGKILL');
      await killed(traced);
    }
    // The same host (its state folder) comes back without traces: the plain bundle replays the run.
    const plain = await inProcessWorker(env, queue, state);
    try {
      const outcome = await plain.worker.runUntil(async () => {
        await approveAll(handle);
        return runOutcome(handle, null);
      });
      expect(outcome.record).toEqual({ ...CANONICAL_RECORD, trace_id: traceId });
    } finally {
      plain.close();
    }
  });

  it("adds no storage of trace contexts to the workflow thread for each run in the worker's cache", async () => {
    // On Node 20 every enabled AsyncLocalStorage of a thread stamps each promise made in it, so a
    // storage per cached run costs every promise one stamp per run (workflows/trace-context.ts).
    // The traced bundle's interceptors, around a workflow that waits, in this test's own thread
    // (debugMode) so that a promise made here shows the thread's stamps.
    const { code } = await bundleWorkflowCode({
      ...workflowBundleOptions('traced'),
      workflowsPath: require.resolve('./helpers/parked-workflow'),
      logger: quietLogger,
    });
    const taskQueue = uniqueQueue('stamps');
    const worker = await Worker.create({
      connection: env.nativeConnection,
      taskQueue,
      workflowBundle: { code },
      debugMode: true,
      sinks: workerTelemetry(null).sinks,
      maxCachedWorkflows: 100,
    });
    const stamps = () => Object.getOwnPropertySymbols(Promise.resolve()).filter((s) => s.description === 'kResourceStore').length;
    const handles: WorkflowHandle[] = [];
    const cacheUpTo = async (n: number) => {
      while (handles.length < n) {
        const h = await env.client.workflow.start('parked', { taskQueue, workflowId: `${taskQueue}-${handles.length}` });
        handles.push(h);
        await waitFor('the run waiting', () => h.query<boolean>('waiting'));
      }
      return stamps();
    };
    await worker.runUntil(async () => {
      const few = await cacheUpTo(5);
      const many = await cacheUpTo(25);
      // With a storage of trace contexts per workflow, each of the 20 runs added one stamp.
      expect(many - few).toBe(0);
      await Promise.all(handles.map((h) => h.signal('go')));
      await Promise.all(handles.map((h) => h.result()));
    });
  });

  it('gives each run of a batch a trace of its own, named in timings.json and report.html, never in report.json', async () => {
    const fixture = join(tempDir('traces-batch'), 'linkcheck-nested');
    cpSync(LINKCHECK, fixture, {
      recursive: true,
      filter: (src) => !src.includes(`${join(LINKCHECK, 'replays')}/`) || src.endsWith('canonical.json'),
    });
    mkdirSync(join(fixture, 'replays'), { recursive: true });
    const out = tempDir('traces-batch-out');
    const batch = `traced-batch-${process.pid}`;
    await cli('eval', fixture, '--epochs', '2', '--out', out, '--batch', batch, '--trust-replay');
    const timings = JSON.parse(readFileSync(join(out, 'timings.json'), 'utf8'));
    const ids = timings.run_trace_ids as Record<string, string>;
    expect(Object.keys(ids).sort()).toEqual([`${batch}/linkcheck-nested/canonical/e1`, `${batch}/linkcheck-nested/canonical/e2`]);
    const traces = Object.values(ids);
    expect(traces.every((t) => TRACE_ID.test(t))).toBe(true);
    expect(new Set(traces).size).toBe(2);
    const reportJson = readFileSync(join(out, 'report.json'), 'utf8');
    for (const t of traces) expect(reportJson).not.toContain(t);
    expect(reportJson).not.toContain('trace_id');
    // report.html shows each run's trace id in its row.
    const browser = await launchChromium();
    try {
      const { page, outside } = await browser.newPage();
      const errors: string[] = [];
      page.on('pageerror', (e) => errors.push(e.message));
      await page.goto(pathToFileURL(join(out, 'report.html')).href);
      expect((await page.locator('#runs tbody tr.run code.trace-id').allTextContents()).sort()).toEqual(
        traces.map((t) => `trace ${t}`).sort(),
      );
      expect(errors).toEqual([]);
      expect(outside.aborted).toEqual([]);
    } finally {
      await browser.close();
    }

    // Each run's trace holds its own workflow span and not the batch's.
    for (const [workflowId, traceId] of Object.entries(ids)) {
      const spans = await waitFor(`the trace of ${workflowId}`, async () => {
        const found = receiver.trace(traceId);
        return found.some((s) => s.name === 'RunWorkflow:agentRun') ? found : null;
      });
      const runs = ofType(spans, 'RunWorkflow:agentRun');
      expect(runs.map((s) => [s.attributes.temporalWorkflowId, s.parentSpanId])).toEqual([[workflowId, null]]);
      expect(spans.filter((s) => s.name.includes('agentEval'))).toEqual([]);
    }
    const batchSpans = await waitFor('the batch span', async () => {
      const found = receiver.spans.filter((s) => s.name === 'RunWorkflow:agentEval' && s.attributes.temporalWorkflowId === batch);
      return found.length > 0 ? found : null;
    });
    expect(traces).not.toContain(batchSpans[0].traceId);
    expect(receiver.trace(batchSpans[0].traceId).filter((s) => s.name === 'StartChildWorkflow:agentRun')).toHaveLength(2);
  });
});

describe('a live run', () => {
  it('puts the model token counts on each decide span and the totals on the workflow span', async () => {
    const KEY_ENV = 'AGENT_TEST_TRACES_KEY';
    const canonical = JSON.parse(readFileSync(join(LINKCHECK, 'replays', 'canonical.json'), 'utf8')).decisions as {
      kind: string;
      text?: string;
      call?: { call_id: string; name: string; arguments: unknown };
    }[];
    const replies = canonical
      .filter((d) => d.kind !== 'plan')
      .map((d) =>
        d.kind === 'tool' ? { calls: [{ id: d.call!.call_id, name: d.call!.name, arguments: d.call!.arguments }] } : { text: d.text },
      );
    const server = await new ProviderServer((_req, i) => ({
      body: reply('openai', { ...(replies[i] ?? { text: 'done' }), usage: [1000 + i, 10 + i, i % 2 === 0 ? 500 : 0] }),
    })).start();
    const providers = join(tempDir('traces-providers'), 'providers.json');
    const endpoint = addEndpoint(providers, endpointOf('openai', server, KEY_ENV));
    const taskQueue = uniqueQueue('traces-live');
    const worker = spawnWorker(env, taskQueue, tempDir('traces-live-state'), {
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      AGENT_PROVIDERS_FILE: providers,
      [KEY_ENV]: 'sk-test-traces',
    });
    try {
      const handle = await startRun(
        env.client,
        {
          fixture: LINKCHECK,
          source: { kind: 'provider', endpoint, model: 'test-model' },
          backend: 'docker',
          approver: 'policy:approve-writable',
        },
        { taskQueue, workflowId: `traced-live-${process.pid}` },
      );
      const outcome = await runOutcome(handle, null);
      expect(outcome.record).toMatchObject({
        status: 'completed',
        turns: 7,
        usage: { model_calls: 7, input_tokens: 7021, output_tokens: 91, cached_tokens: 2000 },
      });
      const traceId = outcome.record.trace_id!;
      expect(traceId).toMatch(TRACE_ID);
      const spans = await waitFor('the live run trace', async () => {
        const found = receiver.trace(traceId);
        return found.some((s) => s.name === 'RunWorkflow:agentRun') && ofType(found, 'RunActivity:decide').length === 7 ? found : null;
      });
      const decide = ofType(spans, 'RunActivity:decide')
        .map((s) => s.attributes)
        .sort((x, y) => Number(x['agent.turn']) - Number(y['agent.turn']));
      expect(
        decide.map((a) => [
          a['agent.turn'],
          a['gen_ai.system'],
          a['gen_ai.request.model'],
          a['gen_ai.usage.input_tokens'],
          a['gen_ai.usage.output_tokens'],
          a['agent.usage.cached_tokens'],
        ]),
      ).toEqual([0, 1, 2, 3, 4, 5, 6].map((i) => [i + 1, 'openai', 'test-model', 1000 + i, 10 + i, i % 2 === 0 ? 500 : 0]));
      expect(ofType(spans, 'RunWorkflow:agentRun')[0].attributes).toMatchObject({
        'agent.status': 'completed',
        'gen_ai.usage.input_tokens': 7021,
        'gen_ai.usage.output_tokens': 91,
        'agent.usage.cached_tokens': 2000,
        'agent.usage.model_calls': 7,
      });
    } finally {
      worker.kill('SIGTERM');
      await killed(worker);
      await server.close();
    }
  });
});
