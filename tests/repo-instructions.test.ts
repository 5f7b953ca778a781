/**
 * AGENTS.md as project instructions of a repository run: in the system prompt, the stable front
 * of every request (before the summary and the steps, which change each turn), pinned by a golden
 * request body; cut to 32 KiB with a visible note; its digest in the trace. Live runs through the
 * official SDK against the local test server, on the docker backend, on a real Temporal server.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { sha256 } from '../host/digest';
import { BUILTIN_PROTECTED, INSTRUCTIONS_CAP_BYTES } from '../core/repo-settings';
import { git, sampleRepo } from './helpers/git-repo';
import { addEndpoint, endpointOf, ProviderServer, reply } from './helpers/provider-server';
import { LINKCHECK, PROJECT_ROOT, tempDir, requireDockerSandbox } from './helpers/run-dir';
import { runOnce, startServer, writeReplay } from './helpers/temporal';

const KEY_ENV = 'AGENT_TEST_INSTRUCTIONS_KEY';
process.env[KEY_ENV] = 'sk-test-instructions';
const PROVIDERS = join(tempDir('providers'), 'providers.json');
const TASK = JSON.parse(readFileSync(join(LINKCHECK, 'fixture.json'), 'utf8')).task as string;

let env: TestWorkflowEnvironment;
beforeAll(async () => {
  await requireDockerSandbox();
  env = await startServer();
});
afterAll(async () => {
  await env?.teardown();
});

/** The canonical linkcheck session as model replies: one call a reply, then the final text. */
function canonicalReplies(): { text?: string; calls?: { id: string; name: string; arguments: unknown }[] }[] {
  const decisions = JSON.parse(readFileSync(join(LINKCHECK, 'replays', 'canonical.json'), 'utf8')).decisions as {
    kind: string;
    text?: string;
    call?: { call_id: string; name: string; arguments: unknown };
  }[];
  return decisions
    .filter((d) => d.kind !== 'plan')
    .map((d) =>
      d.kind === 'tool' ? { calls: [{ id: d.call!.call_id, name: d.call!.name, arguments: d.call!.arguments }] } : { text: d.text },
    );
}

async function liveRun(repo: { dir: string; head: string }, replies: ReturnType<typeof canonicalReplies>) {
  const server = await new ProviderServer((_req, i) => ({ body: reply('openai', replies[i] ?? { text: 'done' }) })).start();
  try {
    const input = {
      repo: { path: repo.dir, base_commit: repo.head, task: TASK },
      source: { kind: 'provider', endpoint: addEndpoint(PROVIDERS, endpointOf('openai', server, KEY_ENV)), model: 'test-model' },
      backend: 'docker',
      approver: 'policy:approve-writable',
    };
    const run = await runOnce(env, input, { providersFile: PROVIDERS });
    return { ...run, requests: server.requests.map((r) => r.body) };
  } finally {
    await server.close();
  }
}

describe('AGENTS.md as project instructions', () => {
  it('goes into the system prompt of every request of a repository run, as the golden request bodies show', async () => {
    const repo = sampleRepo(LINKCHECK);
    const { outcome, trace, requests } = await liveRun(repo, canonicalReplies());
    expect(outcome.record).toMatchObject({
      fixture: 'project',
      status: 'completed',
      writes: 2,
      red_observed: true,
      acceptance: null,
      candidate_tests: { discovered: 3, passed: 3, failed: 0 },
    });
    const agents = git(repo.dir, 'show', `${repo.head}:AGENTS.md`);
    expect(requests).toHaveLength(7);
    for (const body of requests) {
      expect(body.messages[0].role).toBe('system');
      expect(body.messages[0].content).toContain(`## Project instructions (AGENTS.md at the root of the repository)\n`);
      expect(body.messages[0].content.endsWith(`\n${agents}`)).toBe(true);
    }
    expect(requests[0].messages[1].content).toMatch(
      /^Task: .*\n\nFiles you may change \(patterns: \* within one path segment, \*\* across segments\): \*\*\nNew files you may create \(patterns\): \*\*\nProtected, whatever the patterns above say: (.*)\n/,
    );
    expect(requests[0].messages[1].content).toContain(`\nProtected, whatever the patterns above say: ${BUILTIN_PROTECTED.join(', ')}\n`);
    const loaded = trace.find((e) => e.type === 'repository_loaded')!.data as { instructions: unknown };
    expect(loaded.instructions).toEqual({ digest: sha256(Buffer.from(agents)), bytes: Buffer.byteLength(agents), cut: false });

    // Test output timings and action ids (digests over the run id) vary between runs; everything else is fixed.
    const normalized = JSON.stringify(requests)
      .replace(/in \d+\.\d+s/g, 'in N.NNs')
      .replace(/\\"action_id\\":\\"[0-9a-f]{64}\\"/g, '\\"action_id\\":\\"ACTION\\"');
    const bodies = JSON.parse(normalized);
    const file = join(PROJECT_ROOT, 'tests', 'golden', 'openai-repository.json');
    if (process.env.UPDATE_GOLDEN === '1') {
      mkdirSync(join(PROJECT_ROOT, 'tests', 'golden'), { recursive: true });
      writeFileSync(file, `${JSON.stringify(bodies, null, 2)}\n`);
    }
    expect(bodies).toEqual(JSON.parse(readFileSync(file, 'utf8')));
    expect(readFileSync(file, 'utf8')).toContain('Run the tests with `python3 -m pytest -q`. Keep changes small.');
  });

  it("is cut to 32 KiB with a visible note when AGENTS.md is 1 MB, its digest the whole file's", async () => {
    const line = 'Every change needs a test; keep functions short and names plain.\n';
    const big = line.repeat(Math.ceil((1024 * 1024) / line.length));
    const repo = sampleRepo(LINKCHECK, { 'AGENTS.md': big });
    const { outcome, trace, requests } = await liveRun(repo, [{ text: 'Nothing to change.' }]);
    expect(outcome.record).toMatchObject({ status: 'completed', writes: 0 });
    const system: string = requests[0].messages[0].content;
    const instructions = system.slice(system.indexOf('\n\n', system.indexOf('## Project instructions')) + 2);
    const [kept, note] = instructions.split('\n[AGENTS.md is ');
    expect(Buffer.byteLength(kept)).toBeLessThanOrEqual(INSTRUCTIONS_CAP_BYTES);
    expect(Buffer.byteLength(kept)).toBeGreaterThan(INSTRUCTIONS_CAP_BYTES - line.length);
    expect(big.startsWith(kept)).toBe(true);
    expect(note).toBe(
      `${Buffer.byteLength(big)} bytes; only its first ${Buffer.byteLength(kept)} bytes are shown here (the cap is ${INSTRUCTIONS_CAP_BYTES} bytes).]`,
    );
    expect(trace.find((e) => e.type === 'repository_loaded')!.data).toMatchObject({
      instructions: { digest: sha256(Buffer.from(big)), bytes: Buffer.byteLength(big), cut: true },
    });
  });

  it('is recorded but not used by a replay, and a fixture run has none', async () => {
    const repo = sampleRepo(LINKCHECK);
    const replay = writeReplay([{ kind: 'final', text: 'Nothing to change.' }]);
    const { trace } = await runOnce(env, {
      repo: { path: repo.dir, base_commit: repo.head, task: TASK, trusted: true },
      source: { kind: 'replay', path: replay, trusted: true },
      backend: 'local',
      approver: 'policy:approve-writable',
    });
    expect(trace.find((e) => e.type === 'repository_loaded')!.data).toMatchObject({ instructions: { cut: false } });
    expect(trace.filter((e) => e.type === 'model_requested')).toHaveLength(1);
  });
});
