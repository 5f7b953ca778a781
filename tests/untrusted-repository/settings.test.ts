/**
 * The repository is untrusted input, and so is a run's input: settings may only make a run
 * stricter, and whether commands run on the worker's host is the worker's operator's decision and
 * the user's, never the repository's or the input's. Real git repositories, a real Temporal
 * server, real workers; the budget of a run tree against a local server that speaks the OpenAI
 * protocol, on the docker backend.
 */
import { execFile } from 'node:child_process';
import { cpSync, existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { runHandle } from '../../client/run-access';
import type { RunInput, Usage } from '../../core/contracts';
import type { TraceEvent } from '../../core/trace';
import { readSettings } from '../../host/settings';
import { git, sampleRepo } from '../helpers/git-repo';
import { addEndpoint, endpointOf, ProviderServer, reply } from '../helpers/provider-server';
import { freePort, LINKCHECK, PROJECT_ROOT, tempDir, requireDockerSandbox } from '../helpers/run-dir';
import { runOnce, startServer, type RunOnceOptions } from '../helpers/temporal';
import type { RunOutcome } from '../../core/run-view';

const exec = promisify(execFile);
const CLI = join(PROJECT_ROOT, 'dist', 'client', 'cli.js');
const REPLAY = join(LINKCHECK, 'replays', 'canonical.json');

let env: TestWorkflowEnvironment;
beforeAll(async () => {
  env = await startServer();
});
afterAll(async () => {
  await env?.teardown();
});

const run = (input: RunInput, opts?: RunOnceOptions) => runOnce(env, input, opts);
/** A worker whose operator does not allow local commands (AGENT_ALLOW_LOCAL unset on a plain worker). */
const noLocal: RunOnceOptions = { settings: { ...readSettings({ ...process.env, AGENT_ALLOW_LOCAL: '0' }) } };

/** `npm run agent -- <args>` on a fresh state folder with the embedded default: exit code, stderr lines, what the folder holds. */
async function agent(...args: string[]): Promise<{ code: number; lines: string[]; state: string[] }> {
  const stateDir = tempDir('agent-refused');
  const childEnv: NodeJS.ProcessEnv = {
    ...process.env,
    AGENT_STATE_DIR: stateDir,
    AGENT_DEV_SERVER_PORT: String(await freePort()),
    AGENT_DEV_UI_PORT: String(await freePort()),
  };
  delete childEnv.TEMPORAL_ADDRESS;
  const ended = await exec(process.execPath, [CLI, ...args], { env: childEnv, cwd: PROJECT_ROOT }).then(
    () => ({ code: 0, stderr: '' }),
    (e: { code: number; stderr: string }) => e,
  );
  return { code: ended.code, lines: ended.stderr.split('\n').filter(Boolean), state: readdirSync(stateDir) };
}

/** The input of a repository run as a client that skipped the command line's checks would send it. */
function repoInput(dir: string, replay: string, o: { trusted?: boolean; approver?: RunInput['approver'] } = {}): RunInput {
  return {
    repo: { path: dir, base_commit: git(dir, 'rev-parse', 'HEAD').trim(), task: 'Fix it.', ...(o.trusted ? { trusted: true } : {}) },
    source: { kind: 'replay', path: replay, trusted: true },
    backend: 'local',
    approver: o.approver ?? 'interactive',
  };
}

function writeReplay(decisions: unknown[]): string {
  const file = join(tempDir('replay'), 'attempt.json');
  writeFileSync(file, JSON.stringify({ schema_version: 1, decisions }));
  return file;
}

const approvals = (trace: TraceEvent[]) => trace.filter((e) => e.type === 'approval_recorded');

describe("a repository's approver", () => {
  const selfApproving = () =>
    sampleRepo(LINKCHECK, { '.coding-agent.json': JSON.stringify({ schema_version: 1, policy: 'policy:approve-writable' }) }).dir;
  const WRITE = writeReplay([
    {
      kind: 'tool',
      call: {
        call_id: 'new-test',
        name: 'apply_patch',
        arguments: { path: 'tests/test_x.py', version: 'absent', old: '', new: 'x = 1\n' },
      },
    },
    { kind: 'final', text: 'Done.' },
  ]);

  it('that approves by itself is refused by the command line in one line, with nothing started', async () => {
    const result = await agent('run', selfApproving(), '--task', 'fix it', '--replay', REPLAY, '--trust-replay', '--trust-repository');
    expect(result).toEqual({
      code: 2,
      lines: [
        '.coding-agent.json: policy: policy:approve-writable approves writes by itself, and a repository may name only an approver that asks a person (interactive); choose a policy yourself with --approver',
      ],
      state: [],
    });
  });

  it.each(['interactive', 'policy:approve-writable'] as const)(
    'is refused by the worker too, for a client that skipped that check (approver %s): no write approved, none made',
    async (approver) => {
      const { outcome, trace, receipts, ledgerEntries } = await run(repoInput(selfApproving(), WRITE, { trusted: true, approver }));
      expect(outcome.record).toMatchObject({ status: 'failed', reason: 'invalid_input', writes: 0, receipts: 0 });
      expect(outcome.state.detail).toMatch(/policy:approve-writable approves writes by itself/);
      expect(approvals(trace)).toEqual([]);
      expect([receipts, ledgerEntries]).toEqual([[], 0]);
    },
  );
});

describe("a repository's protected list", () => {
  it('adds to the built-in one: with protected [] a write to .github/workflows is denied, not put to the approver', async () => {
    const { dir } = sampleRepo(LINKCHECK, { '.coding-agent.json': JSON.stringify({ schema_version: 1, protected: [] }) });
    const workflow = { path: '.github/workflows/ci.yml', version: 'absent', old: '', new: 'on: push\njobs: {}\n' };
    const replay = writeReplay([
      { kind: 'tool', call: { call_id: 'add-workflow', name: 'apply_patch', arguments: workflow } },
      { kind: 'final', text: 'Added CI.' },
    ]);
    const { outcome, trace, stateDir, runId, receipts } = await run(
      repoInput(dir, replay, { trusted: true, approver: 'policy:approve-writable' }),
    );
    const observed = trace.find((e) => e.type === 'tool_observed' && e.call_id === 'add-workflow')!.data as {
      error: string;
      data: { rules: { id: string }[] };
    };
    expect(observed.error).toBe('write_denied');
    expect(observed.data.rules.map((r) => r.id)).toContain('protected-pattern');
    expect(approvals(trace)).toEqual([]);
    expect(receipts).toEqual([]);
    expect(outcome.record).toMatchObject({ writes: 0, tool_errors: { write_denied: 1 }, trust_repository: true });
    expect(existsSync(join(stateDir, 'runs', runId, 'workspace', '.github'))).toBe(false);
  });
});

describe("a repository's budgets", () => {
  it("are capped by the operator's maximums, and the trace names what was asked and what was given", async () => {
    const budgets = { max_turns: 40, max_tool_calls: 90 };
    const { dir } = sampleRepo(LINKCHECK, { '.coding-agent.json': JSON.stringify({ schema_version: 1, budgets }) });
    const reads = Array.from({ length: 6 }, (_, i) => ({
      kind: 'tool',
      call: { call_id: `read-${i}`, name: 'read_file', arguments: { path: 'src/linkcheck.py', start: i + 1 } },
    }));
    const operator = { ...readSettings(), maxBudgets: { ...readSettings().maxBudgets, max_turns: 3 } };
    const { outcome, trace } = await run(repoInput(dir, writeReplay(reads), { trusted: true }), { settings: operator });
    expect(trace.find((e) => e.type === 'budgets_capped')!.data).toEqual({ capped: [{ field: 'max_turns', asked: 40, max: 3 }] });
    expect(outcome.state.budgets).toMatchObject({ max_turns: 3, max_tool_calls: 90 });
    expect(outcome.record).toMatchObject({ status: 'budget_exhausted', reason: 'max_turns', turns: 3 });
  });
});

describe('local commands', () => {
  /** A copy of the link-check fixture whose test command first writes `marker`. */
  function markingFixture(marker: string): string {
    const dir = join(tempDir('marking-fixture'), 'linkcheck-nested');
    cpSync(LINKCHECK, dir, { recursive: true });
    const fixture = JSON.parse(readFileSync(join(dir, 'fixture.json'), 'utf8'));
    fixture.tests.command = ['sh', '-c', `echo ran > '${marker}' && exec "$0" "$@"`, ...fixture.tests.command];
    writeFileSync(join(dir, 'fixture.json'), JSON.stringify(fixture));
    return dir;
  }
  const fixtureInput = (fixture: string): RunInput => ({
    fixture,
    source: { kind: 'replay', path: REPLAY, trusted: true },
    backend: 'local',
    approver: 'policy:approve-writable',
  });

  it('run only where the worker allows them: a trusted replay on a worker that does not ends local_not_allowed and runs nothing', async () => {
    const marker = join(tempDir('marker'), 'ran');
    const refused = await run(fixtureInput(markingFixture(marker)), noLocal);
    expect(refused.outcome.record).toMatchObject({ status: 'failed', reason: 'local_not_allowed', turns: 0, writes: 0 });
    expect(refused.outcome.state.detail).toMatch(/AGENT_ALLOW_LOCAL=1.*--backend docker/);
    expect(existsSync(join(refused.stateDir, 'runs'))).toBe(false); // no workspace either
    expect(existsSync(marker)).toBe(false);
    // The same input on a worker that allows local commands runs the test command: the marker is how a run would show.
    const allowed = await run(fixtureInput(markingFixture(marker)));
    expect(allowed.outcome.record).toMatchObject({ status: 'completed' });
    expect(readFileSync(marker, 'utf8')).toBe('ran\n');
  });

  it("of a repository need the user's trust: without it the worker refuses before its conftest.py could load", async () => {
    const marker = join(tempDir('marker'), 'conftest-ran');
    const { dir } = sampleRepo(LINKCHECK, { 'tests/conftest.py': `open(${JSON.stringify(marker)}, 'w').write('loaded')\n` });
    const replay = writeReplay([
      { kind: 'tool', call: { call_id: 'tests', name: 'run_tests', arguments: { preset: 'candidate_tests' } } },
      { kind: 'final', text: 'Looked.' },
    ]);
    const untrusted = await run(repoInput(dir, replay));
    expect(untrusted.outcome.record).toMatchObject({ status: 'failed', reason: 'repository_untrusted', trust_repository: false, turns: 0 });
    expect(untrusted.outcome.state.detail).toMatch(/--trust-repository.*--backend docker/);
    expect(untrusted.trace.find((e) => e.type === 'run_started')!.data).toMatchObject({ trust_repository: false });
    expect(existsSync(marker)).toBe(false);
    const trusted = await run(repoInput(dir, replay, { trusted: true }));
    expect(trusted.outcome.record).toMatchObject({ trust_repository: true, turns: 2 });
    expect(readFileSync(marker, 'utf8')).toBe('loaded');
  });

  it('of a repository are refused by the command line without --trust-repository, naming it and --backend docker', async () => {
    const { dir } = sampleRepo(LINKCHECK);
    const tasks = join(tempDir('tasks'), 'tasks.jsonl');
    writeFileSync(tasks, `${JSON.stringify({ id: 'a', repo: dir, base: 'main', task: 't', replays: { canonical: REPLAY } })}\n`);
    const [single, batch, fixture] = await Promise.all([
      agent('run', dir, '--task', 'fix it', '--replay', REPLAY, '--trust-replay'),
      agent('eval', tasks, '--trust-replay'),
      agent('run', LINKCHECK, '--replay', REPLAY, '--trust-repository'),
    ]);
    expect(single).toEqual({
      code: 2,
      lines: [
        `on the local backend the repository's tests run on this machine with your rights: add --trust-repository if you trust the content of ${dir}, or run it in the sandbox with --backend docker`,
      ],
      state: [],
    });
    expect(batch).toEqual({
      code: 2,
      lines: [
        "on the local backend the repositories' tests run on this machine with your rights: add --trust-repository if you trust the content of every repository the tasks name, or run them in the sandbox with --backend docker",
      ],
      state: [],
    });
    expect({ ...fixture, lines: fixture.lines.slice(0, 1) }).toEqual({
      code: 2,
      lines: [expect.stringMatching(/--trust-repository are for a repository$/)],
      state: [],
    });
  });
});

describe('a run tree over max_cost_usd', () => {
  const KEY_ENV = 'AGENT_TEST_TREE_KEY';
  process.env[KEY_ENV] = 'sk-test-tree';
  /** US dollars per million tokens. */
  const PRICE = { input: 2, output: 8 };
  const BUDGET_USD = 0.25;
  const OUTPUT_TOKENS = 20;
  const costOf = (u: { input_tokens: number; output_tokens: number }) =>
    (u.input_tokens * PRICE.input + u.output_tokens * PRICE.output) / 1e6;

  it('is refused when the model has no price, before any request', async () => {
    const server = await new ProviderServer(() => ({ body: reply('openai', { text: 'done' }) })).start();
    const providersFile = join(tempDir('providers'), 'providers.json');
    try {
      const endpoint = addEndpoint(providersFile, endpointOf('openai', server, KEY_ENV));
      const { outcome } = await run(
        {
          fixture: LINKCHECK,
          source: { kind: 'provider', endpoint, model: 'unpriced-model' },
          backend: 'docker',
          approver: 'policy:approve-writable',
          budgets: { max_cost_usd: 1 },
        },
        { providersFile, settings: { ...readSettings(), pricesFile: null } },
      );
      expect(outcome.record).toMatchObject({ status: 'failed', reason: 'invalid_input', turns: 0 });
      expect(outcome.state.detail).toBe(
        "max_cost_usd needs the price of model unpriced-model, and the worker's prices file (AGENT_PRICES_FILE) has none: its cost could not be counted",
      );
      expect(server.requests).toEqual([]);
    } finally {
      await server.close();
    }
  });

  it('dispatches at most what the budget funds out of 50 tasks, and the whole tree spends no more than the budget', async () => {
    await requireDockerSandbox();
    const firstUser = (body: any): string => body.messages.find((m: { role: string }) => m.role === 'user').content as string;
    const steps = (body: any) => body.messages.filter((m: { role: string }) => m.role === 'assistant').length;
    // Every reply is priced from the request's own size, as a provider counts it (about four characters a token).
    const usage: Map<number, { input_tokens: number; output_tokens: number }> = new Map();
    const server = await new ProviderServer((req, i) => {
      const u = { input_tokens: Math.ceil(req.bytes / 4), output_tokens: OUTPUT_TOKENS };
      usage.set(i, u);
      const step = steps(req.body);
      const calls = firstUser(req.body).includes('one task of a larger run')
        ? // A task reads, and reads again, until its share of the budget is spent.
          [{ id: `read-${step}`, name: 'read_file', arguments: { path: 'src/mathx.py' } }]
        : // The orchestrating run dispatches one task a turn, 50 in all.
          [
            {
              id: `dispatch-${step + 1}`,
              name: 'dispatch_task',
              arguments: { title: `task ${step + 1}`, requirements: 'Read src/mathx.py.', known_facts: [], suggestions: [] },
            },
          ];
      return {
        body: reply('openai', { calls: step < 50 ? calls : [], text: step < 50 ? null : 'done', usage: [u.input_tokens, u.output_tokens] }),
      };
    }).start();
    const providersFile = join(tempDir('providers'), 'providers.json');
    const prices = join(tempDir('prices'), 'prices.json');
    writeFileSync(prices, JSON.stringify({ 'tree-model': PRICE }));
    try {
      const endpoint = addEndpoint(providersFile, endpointOf('openai', server, KEY_ENV));
      const { outcome, trace } = await run(
        {
          fixture: join(PROJECT_ROOT, 'fixtures', 'py-two-modules'),
          source: { kind: 'provider', endpoint, model: 'tree-model' },
          backend: 'docker',
          approver: 'policy:approve-writable',
          subruns: { max_children: 50, max_active: 10, max_depth: 1 },
          budgets: { max_turns: 500, max_tool_calls: 1000, max_cost_usd: BUDGET_USD, max_output_tokens: 64 },
        },
        { providersFile, settings: { ...readSettings(), pricesFile: prices } },
      );
      const record = outcome.record;
      expect(record).toMatchObject({ status: 'budget_exhausted', reason: 'max_cost_usd' });
      const tasks = outcome.state.subruns!.tasks;
      // The budget, not the 50 the model asked for, decided how many tasks there were.
      expect(record.subruns!.dispatched).toBeLessThan(50);
      expect(tasks.length).toBe(record.subruns!.dispatched);
      // A task ends when its share is spent, or when the run, out of budget itself, stops it.
      for (const t of tasks)
        expect([
          ['budget_exhausted', 'max_cost_usd'],
          ['cancelled', 'interrupted'],
        ]).toContainEqual([t.status, t.reason]);
      expect(tasks.filter((t) => t.reason === 'max_cost_usd').length).toBeGreaterThan(0);

      // What the server saw, priced as the prices file says: at most the budget, and exactly the tree's total.
      const spent = [...usage.values()].reduce((n, u) => n + costOf(u), 0);
      expect(spent).toBeLessThanOrEqual(BUDGET_USD);
      const tree = record.tree!;
      expect(tree.usage!.model_calls).toBe(server.requests.length);
      expect(tree.usage!.cost_usd!).toBeCloseTo(spent, 12);
      // The tree is the run and each task's run, summed from their own records.
      const outcomes = await Promise.all(tasks.map(async (t) => (await runHandle(env.client, t.task_id).result()) as RunOutcome));
      const children = outcomes.map((o) => o.record);
      const sum = children.reduce<Usage>(
        (n, r) => ({
          model_calls: n.model_calls + (r.usage?.model_calls ?? 0),
          input_tokens: n.input_tokens + (r.usage?.input_tokens ?? 0),
          output_tokens: n.output_tokens + (r.usage?.output_tokens ?? 0),
          cached_tokens: 0,
          cost_usd: n.cost_usd! + (r.usage?.cost_usd ?? 0),
        }),
        { ...record.usage!, cached_tokens: 0 },
      );
      expect(tree).toMatchObject({
        runs: 1 + tasks.length,
        turns: record.turns + children.reduce((n, r) => n + r.turns, 0),
        usage: { model_calls: sum.model_calls, input_tokens: sum.input_tokens, output_tokens: sum.output_tokens },
      });
      // Each task had its share of what was left, and kept to it; the run stopped at the call it could not afford.
      // A task stopped before it loaded has no budgets yet and spent nothing.
      const shares = outcomes.map((o) => o.state.budgets?.max_cost_usd ?? 0);
      outcomes.forEach((o, i) => expect(o.record.usage?.cost_usd ?? 0).toBeLessThanOrEqual(shares[i]));
      expect(trace.filter((e) => e.type === 'task_ended')).toHaveLength(tasks.length);
      expect(record.cost_limit!.max_cost_usd).toBe(BUDGET_USD);
      expect(record.cost_limit!.spent_usd + record.cost_limit!.next_call_usd!).toBeGreaterThan(BUDGET_USD);
    } finally {
      await server.close();
    }
  }, 300_000);
});
