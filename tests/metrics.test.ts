/**
 * The worker's Prometheus endpoint (AGENT_METRICS_ADDRESS) on a real worker process: after the
 * canonical run, failing runs (always-empty, replay_exhausted, transient model errors, max_turns),
 * a run approved by a person, a cancelled run and a live run, the governance metrics show exactly
 * those counts, beside the SDK's own metrics, and Debian's `promtool check metrics` accepts the
 * output. The worker keeps no workflow in its cache (AGENT_MAX_CACHED_WORKFLOWS=0), so every
 * workflow task replays its run from the start: counts that are exact show that a replay records
 * nothing twice. Also: docs/observability.md's table of metrics is the module's.
 */
import { execFileSync, spawnSync, type ChildProcess } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { METRICS, metricsTable } from '../core/metrics';
import { freePort, LINKCHECK, PROJECT_ROOT, tempDir } from './helpers/run-dir';
import { addEndpoint, endpointOf, ProviderServer, reply } from './helpers/provider-server';
import { canonicalInput, killed, pendingApproval, spawnWorker, startServer, uniqueQueue, waitFor, writeReplay } from './helpers/temporal';
import { runOutcome, sendApproval, startRun } from '../client/run-access';
import type { RunInput } from '../core/contracts';

/** One sample of the exposition text: its name, labels and value. */
interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

function parseExposition(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`not an exposition line: ${line}`);
    const labels = Object.fromEntries([...(m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)].map((l) => [l[1], l[2]]));
    samples.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return samples;
}

/** The sum of a metric's samples whose labels include `labels`. */
const total = (samples: Sample[], name: string, labels: Record<string, string> = {}) =>
  samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)).reduce((a, s) => a + s.value, 0);

describe('the worker metrics endpoint', () => {
  let env: TestWorkflowEnvironment;
  let worker: ChildProcess;
  let server: ProviderServer;
  let address: string;
  let endpoint: string;
  const taskQueue = uniqueQueue('metrics');
  const KEY_ENV = 'AGENT_TEST_METRICS_KEY';

  beforeAll(async () => {
    env = await startServer();
    // A live session: the canonical calls one a reply, every other call with cached input.
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
    server = await new ProviderServer((_req, i) => ({
      body: reply('openai', { ...(replies[i] ?? { text: 'done' }), usage: [1000, 100, i % 2 === 0 ? 500 : 0] }),
    })).start();
    const dir = tempDir('metrics-config');
    const providers = join(dir, 'providers.json');
    endpoint = addEndpoint(providers, endpointOf('openai', server, KEY_ENV));
    const prices = join(dir, 'prices.json');
    writeFileSync(prices, JSON.stringify({ 'test-model': { input: 1, output: 2, cached_input: 0.5 } }));
    address = `127.0.0.1:${await freePort()}`;
    worker = spawnWorker(env, taskQueue, tempDir('metrics-state'), {
      AGENT_METRICS_ADDRESS: address,
      AGENT_MAX_CACHED_WORKFLOWS: '0',
      AGENT_PROVIDERS_FILE: providers,
      AGENT_PRICES_FILE: prices,
      [KEY_ENV]: 'sk-test-metrics',
    });
  });
  afterAll(async () => {
    worker?.kill('SIGTERM');
    if (worker) await killed(worker);
    await server?.close();
    await env?.teardown();
  });

  const workflowIds: string[] = [];
  const start = (input: RunInput) => {
    workflowIds.push(`counted-run-${process.pid}-${workflowIds.length + 1}`);
    return startRun(env.client, input, { taskQueue, workflowId: workflowIds.at(-1)! });
  };
  const run = async (input: RunInput) => (await runOutcome(await start(input), null)).record;
  const replay = (decisions: unknown[]) =>
    canonicalInput('canonical', { source: { kind: 'replay', path: writeReplay(decisions), trusted: true } });

  it('counts the canonical run and failing runs exactly, beside the SDK metrics, in output promtool accepts', async () => {
    const metricsUrl = `http://${address}/metrics`;
    await waitFor('the metrics endpoint', async () => (await fetch(metricsUrl)).ok);

    expect(await run(canonicalInput('canonical'))).toMatchObject({ status: 'completed', tool_errors: { tests_failed: 1 } });
    expect(await run(canonicalInput('always-empty'))).toMatchObject({ status: 'failed', reason: 'verification_failed' });
    expect(await run(replay([{ kind: 'plan', text: 'think' }]))).toMatchObject({ status: 'failed', reason: 'replay_exhausted' });
    expect(
      await run(
        replay([
          { kind: 'model_error', transient: true },
          { kind: 'model_error', transient: true },
          { kind: 'final', text: 'done' },
        ]),
      ),
    ).toMatchObject({ reason: 'verification_failed' });
    expect(await run(canonicalInput('canonical', { budgets: { max_turns: 2 } }))).toMatchObject({
      status: 'budget_exhausted',
      reason: 'max_turns',
    });
    // A person approves both writes of a canonical run; another run is cancelled while it waits.
    const approved = await start(canonicalInput('canonical', { approver: 'interactive' }));
    let last: string | undefined;
    for (let i = 0; i < 2; i++) {
      const p = await pendingApproval(approved, last);
      await new Promise((r) => setTimeout(r, 300));
      await sendApproval(approved, {
        action_id: p.action_id,
        decision: 'approve',
        args_digest: p.args_digest,
        workspace_digest: p.workspace_digest,
        principal: 'user:test',
      });
      last = p.action_id;
    }
    expect((await runOutcome(approved, null)).record.status).toBe('completed');
    const cancelled = await start(canonicalInput('canonical', { approver: 'interactive' }));
    await pendingApproval(cancelled);
    await cancelled.cancel();
    expect((await runOutcome(cancelled, null)).record).toMatchObject({ status: 'cancelled', reason: 'cancelled' });
    // A live run: seven model calls, four with cached input, priced.
    const live = await run({
      fixture: LINKCHECK,
      source: { kind: 'provider', endpoint, model: 'test-model' },
      backend: 'docker',
      approver: 'policy:approve-writable',
    });
    expect(live).toMatchObject({
      status: 'completed',
      usage: { model_calls: 7, input_tokens: 7000, output_tokens: 700, cached_tokens: 2000 },
    });
    expect(live.usage!.cost_usd).toBeCloseTo(0.0074, 10);

    const text = await (await fetch(metricsUrl)).text();
    const samples = parseExposition(text);
    const finished = (status: string, reason: string) => total(samples, 'agent_runs_finished_total', { status, reason, role: 'run' });
    expect({
      completed: finished('completed', 'none'),
      verificationFailed: finished('failed', 'verification_failed'),
      exhausted: finished('failed', 'replay_exhausted'),
      maxTurns: finished('budget_exhausted', 'max_turns'),
      cancelled: finished('cancelled', 'cancelled'),
      all: total(samples, 'agent_runs_finished_total'),
    }).toEqual({ completed: 3, verificationFailed: 2, exhausted: 1, maxTurns: 1, cancelled: 1, all: 8 });
    expect(total(samples, 'agent_run_turns_count')).toBe(8);
    // Turns: 8 + 8 + 7 (live) completed; always-empty 5 and the retried run 1; 2 till exhausted; 2 at max_turns; the cancelled run stopped in turn 3.
    expect(total(samples, 'agent_run_turns_sum', { status: 'completed' })).toBe(23);
    expect(total(samples, 'agent_run_turns_sum')).toBe(23 + 6 + 2 + 2 + 3);
    expect(total(samples, 'agent_limit_hits_total', { limit: 'max_turns' })).toBe(1);
    expect(total(samples, 'agent_cancellations_total', { kind: 'cancelled' })).toBe(1);
    // tests_failed once in each run that reached its red test run: two canonical runs and the live one.
    expect(total(samples, 'agent_tool_errors_total', { code: 'tests_failed' })).toBe(3);
    expect(total(samples, 'agent_tool_errors_total')).toBe(3);
    // Calls: 6 in each of the three complete canonical sessions, 3 in always-empty, 1 (read) before the turn limit, 2 before the cancel.
    expect(total(samples, 'agent_tool_calls_total')).toBe(18 + 3 + 1 + 2);
    expect(total(samples, 'agent_tool_calls_total', { tool: 'run_tests' })).toBe(7);
    expect(total(samples, 'agent_model_retries_total')).toBe(2);
    expect(total(samples, 'agent_model_retry_delay_seconds_count')).toBe(2);
    expect(total(samples, 'agent_approval_wait_seconds_count', { decision: 'approve' })).toBe(2);
    expect(total(samples, 'agent_approval_wait_seconds_sum', { decision: 'approve' })).toBeGreaterThanOrEqual(0.5);
    expect(total(samples, 'agent_model_calls_total', { provider: 'openai' })).toBe(7);
    expect(total(samples, 'agent_model_tokens_total', { kind: 'input' })).toBe(7000);
    expect(total(samples, 'agent_model_tokens_total', { kind: 'cached' })).toBe(2000);
    expect(total(samples, 'agent_model_input_tokens_count')).toBe(7);
    expect(total(samples, 'agent_prompt_cache_hits_total')).toBe(4);
    expect(total(samples, 'agent_run_cost_usd_count')).toBe(1);
    expect(total(samples, 'agent_run_cost_usd_sum')).toBeCloseTo(0.0074, 10);
    // Schedule-to-start from the activities' side, and the SDK's own metrics under its prefix.
    // A replay decides in a local activity on the run's host, a live model in an activity:
    // localDecide 8 + 5 + 2 + 3 (two retries) + 3 (the wrap-up after max_turns) + 8 + 3; decide 7.
    expect(total(samples, 'agent_activity_queue_wait_seconds_count', { activity_type: 'localDecide' })).toBe(32);
    expect(total(samples, 'agent_activity_queue_wait_seconds_count', { activity_type: 'decide' })).toBe(7);
    expect(total(samples, 'temporal_workflow_completed_total')).toBeGreaterThanOrEqual(8);
    expect(samples.some((s) => s.name.startsWith('temporal_activity_schedule_to_start_latency'))).toBe(true);
    // Label values come from closed sets: no workflow id, run id, fixture or path in any label.
    const labelValues = new Set(samples.flatMap((s) => Object.values(s.labels)));
    for (const v of labelValues)
      expect({ v, leaks: workflowIds.some((id) => v.includes(id)) || /linkcheck|\/|[0-9a-f]{8}-[0-9a-f]{4}-/.test(v) }).toEqual({
        v,
        leaks: false,
      });

    const promtool = execFileSync('bash', [join(PROJECT_ROOT, 'scripts', 'ensure-promtool.sh')], { encoding: 'utf8' }).trim();
    const checked = spawnSync(promtool, ['check', 'metrics'], { input: text, encoding: 'utf8' });
    expect({ status: checked.status, problems: `${checked.stdout}${checked.stderr}`.trim() }).toEqual({ status: 0, problems: '' });
  });

  it('stops a second worker whose metrics address is taken, naming the variable', async () => {
    const second = spawnWorker(env, uniqueQueue('metrics-second'), tempDir('metrics-second'), { AGENT_METRICS_ADDRESS: address });
    let stderr = '';
    second.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
    const code = await new Promise<number | null>((resolve) => second.once('exit', resolve));
    expect(code).toBe(1);
    expect(stderr).toContain(`AGENT_METRICS_ADDRESS ${address}: Failed to start prometheus metrics exporter: Address already in use`);
  });

  it('lists the metrics in docs/observability.md exactly as the module defines them', () => {
    const readme = readFileSync(join(PROJECT_ROOT, 'docs', 'observability.md'), 'utf8');
    const table = metricsTable();
    expect({ inReadme: readme.includes(`\n${table}\n`), table }).toEqual({ inReadme: true, table });
    expect(Object.keys(METRICS).length).toBeGreaterThanOrEqual(15);
  });
});
