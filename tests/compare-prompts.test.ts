/**
 * Two prompt versions evaluated live: `eval --endpoint --model --prompt` runs two fixtures for 5
 * epochs on the docker backend against a local server that speaks the OpenAI protocol, once with
 * prompt v1 and once with v2, a copy whose system prompt says one sentence more. The server
 * answers each conversation with its fixture's canonical calls, and under v2 on the link-check
 * fixture reads the source twice more. The records carry each version and digest, and
 * `eval compare` flags that fixture's turns, tool error rate and repeated calls and nothing in
 * the other fixture.
 */
import { execFile, type ChildProcess } from 'node:child_process';
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { Comparison, EvalReport } from '../client/report/report';
import { addEndpoint, endpointOf, ProviderServer, reply, type ReplyCall } from './helpers/provider-server';
import { LINKCHECK, PROJECT_ROOT, tempDir } from './helpers/run-dir';
import { killed, spawnWorker, startServer, uniqueQueue } from './helpers/temporal';

const exec = promisify(execFile);
const CLI = join(PROJECT_ROOT, 'dist', 'client', 'cli.js');
const WORDCOUNT = join(PROJECT_ROOT, 'fixtures', 'wordcount-node');
const KEY_ENV = 'AGENT_TEST_COMPARE_KEY';
/** The sentence prompt v2 adds, and by which the server knows it. */
const V2_SENTENCE = 'Before you change a file, read its source again.';

interface Decision {
  kind: string;
  text?: string;
  call?: { call_id: string; name: string; arguments: unknown };
}

/** A fixture's canonical replay as a model's replies: one call or one final text per turn. */
function replies(fixture: string, readTwiceMore: boolean): ({ calls: ReplyCall[] } | { text: string })[] {
  const decisions = (JSON.parse(readFileSync(join(fixture, 'replays', 'canonical.json'), 'utf8')).decisions as Decision[]).filter(
    (d) => d.kind !== 'plan',
  );
  const out = decisions.map((d) =>
    d.kind === 'tool' ? { calls: [{ id: d.call!.call_id, name: d.call!.name, arguments: d.call!.arguments }] } : { text: d.text! },
  );
  if (!readTwiceMore) return out;
  const at = decisions.findIndex((d) => d.call?.call_id === 'read-source');
  const again = (n: number) => ({ calls: [{ ...(out[at] as { calls: ReplyCall[] }).calls[0], id: `read-again-${n}` }] });
  return [...out.slice(0, at + 1), again(1), again(2), ...out.slice(at + 1)];
}

const flagged = (c: Comparison) =>
  [c.behaviours.overall, ...c.behaviours.per_fixture].flatMap((g) =>
    g.behaviours.filter((b) => b.outside).map((b) => `${g.fixture ?? 'overall'}: ${b.key}`),
  );

describe('two prompt versions evaluated live', () => {
  let env: TestWorkflowEnvironment;
  let server: ProviderServer;
  let worker: ChildProcess;
  let cliEnv: NodeJS.ProcessEnv;
  let endpoint: string;
  const tasks = new Map<string, string>(
    [LINKCHECK, WORDCOUNT].map((dir) => [JSON.parse(readFileSync(join(dir, 'fixture.json'), 'utf8')).task as string, dir]),
  );

  beforeAll(async () => {
    env = await startServer();
    // Each request is answered from its own conversation: the fixture from its task, the turn
    // from the replies it already holds, the version from its system prompt.
    server = await new ProviderServer((request) => {
      const messages = request.body.messages as { role: string; content: unknown }[];
      const text = JSON.stringify(messages);
      const fixture = [...tasks].find(([task]) => text.includes(JSON.stringify(task).slice(1, -1)))?.[1];
      if (fixture === undefined) return { status: 400, body: { error: { type: 'invalid_request_error', message: 'no known task' } } };
      const v2 = JSON.stringify(messages[0]).includes(V2_SENTENCE);
      const turn = messages.filter((m) => m.role === 'assistant').length;
      return { body: reply('openai', replies(fixture, v2 && fixture === LINKCHECK)[turn] ?? { text: 'done' }) };
    }).start();
    const providers = join(tempDir('compare-providers'), 'providers.json');
    endpoint = addEndpoint(providers, endpointOf('openai', server, KEY_ENV));
    const prompts = join(tempDir('compare-prompts'), 'prompts');
    cpSync(join(PROJECT_ROOT, 'prompts', 'v1'), join(prompts, 'v1'), { recursive: true });
    cpSync(join(PROJECT_ROOT, 'prompts', 'v1'), join(prompts, 'v2'), { recursive: true });
    writeFileSync(
      join(prompts, 'v2', 'system.md'),
      `${readFileSync(join(prompts, 'v1', 'system.md'), 'utf8').trimEnd()}\n${V2_SENTENCE}\n`,
    );
    const taskQueue = uniqueQueue('compare-prompts');
    const stateDir = tempDir('compare-prompts-state');
    worker = spawnWorker(env, taskQueue, stateDir, {
      AGENT_PROVIDERS_FILE: providers,
      AGENT_PROMPTS_DIR: prompts,
      [KEY_ENV]: 'sk-test-compare',
    });
    cliEnv = { ...process.env, TEMPORAL_ADDRESS: env.address, AGENT_TASK_QUEUE: taskQueue, AGENT_STATE_DIR: stateDir };
  });
  afterAll(async () => {
    worker?.kill('SIGTERM');
    if (worker) await killed(worker);
    await server?.close();
    await env?.teardown();
  });

  const cli = (...args: string[]) =>
    exec(process.execPath, [CLI, ...args], { env: cliEnv, cwd: PROJECT_ROOT, maxBuffer: 16 * 1024 * 1024 });

  it('records each version and digest, and eval compare flags the planted difference in one fixture only', async () => {
    const outs: string[] = [];
    for (const version of ['v1', 'v2']) {
      const out = tempDir(`compare-prompts-${version}`);
      // A live batch with a prompt version: each fixture 5 times, on the docker backend.
      await cli(
        'eval',
        LINKCHECK,
        WORDCOUNT,
        '--endpoint',
        endpoint,
        '--model',
        'test-model',
        '--prompt',
        version,
        '--backend',
        'docker',
        '--epochs',
        '5',
        '--concurrency',
        '4',
        '--out',
        out,
      );
      outs.push(out);
    }
    const [a, b] = outs.map((o) => JSON.parse(readFileSync(join(o, 'report.json'), 'utf8')) as EvalReport);
    const versions = (r: EvalReport) => [...new Set(r.runs.map((run) => `${run.prompt?.version} ${run.prompt?.digest}`))];
    expect(versions(a)).toHaveLength(1);
    expect(versions(b)).toHaveLength(1);
    expect(versions(a)[0]).toMatch(/^v1 [0-9a-f]{64}$/);
    expect(versions(b)[0]).toMatch(/^v2 [0-9a-f]{64}$/);
    expect(versions(b)[0].split(' ')[1]).not.toBe(versions(a)[0].split(' ')[1]);
    // Every run a live one, completed; v2 reads the link-check source twice more.
    const rows = (r: EvalReport) => r.runs.map((run) => [run.fixture, run.replay, run.epoch, run.status, run.turns, run.repeated_calls]);
    const words = a.runs.find((run) => run.fixture === 'wordcount-node')!.turns;
    expect(rows(a)).toEqual([
      ...[1, 2, 3, 4, 5].map((e) => ['linkcheck-nested', null, e, 'completed', 7, 0]),
      ...[1, 2, 3, 4, 5].map((e) => ['wordcount-node', null, e, 'completed', words, 0]),
    ]);
    expect(rows(b)).toEqual([
      ...[1, 2, 3, 4, 5].map((e) => ['linkcheck-nested', null, e, 'completed', 9, 2]),
      ...[1, 2, 3, 4, 5].map((e) => ['wordcount-node', null, e, 'completed', words, 0]),
    ]);
    expect(a.runs.every((run) => run.usage?.model_calls === run.turns)).toBe(true);

    const { stdout } = await cli('eval', 'compare', join(outs[0], 'report.json'), join(outs[1], 'report.json'), '--json');
    const comparison = JSON.parse(stdout) as Comparison;
    expect(comparison.flips).toEqual([]);
    expect(flagged(comparison).sort()).toEqual([
      'linkcheck-nested: repeated_calls',
      'linkcheck-nested: tool_error_rate',
      'linkcheck-nested: turns',
      'overall: repeated_calls',
      'overall: tool_error_rate',
      'overall: turns',
    ]);
    const text = (await cli('eval', 'compare', join(outs[0], 'report.json'), join(outs[1], 'report.json'))).stdout;
    expect(text).toContain('10 paired runs, 0 flipped');
  }, 900_000);
});
