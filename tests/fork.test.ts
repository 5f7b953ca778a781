/**
 * Fork from a turn: `fork --at-turn N` of the canonical run (fixtures/linkcheck-nested, canonical
 * replay) on one worker host, a real Temporal server, real SQLite and real processes. The fork's
 * workspace is restored from the run's baseline and receipted writes and has the digest the run
 * recorded after turn N; its transcript is the run's first N turns; it goes on with the rest of the
 * replay; the run's trace, record, ledger rows, transcript and folders stay as they were. Refused,
 * with the reason, where the host no longer has what a fork needs.
 */
import { appendFileSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { exportReplay } from '../client/export-replay';
import { forkInput } from '../client/commands/fork';
import { runHandle, startRun } from '../client/run-access';
import type { RunInput } from '../core/contracts';
import type { RunOutcome } from '../core/run-view';
import type { TraceEvent, TurnState } from '../core/trace';
import { runPaths, workspaceDigest } from '../workspace/workspace';
import { createWorker } from '../worker';
import { addEndpoint, endpointOf, reply, servedPerTest, type ReplyCall } from './helpers/provider-server';
import { LINKCHECK, tempDir, requireDockerSandbox } from './helpers/run-dir';
import { canonicalInput, CANONICAL_RECORD, startServer, uniqueQueue } from './helpers/temporal';

let env: TestWorkflowEnvironment;
/** The one worker host every run of this file runs on. */
let host: Awaited<ReturnType<typeof createWorker>> & { stateDir: string; taskQueue: string; running: Promise<void> };

beforeAll(async () => {
  env = await startServer();
  const stateDir = tempDir('fork-host');
  const taskQueue = uniqueQueue('fork');
  const worker = await createWorker({ connection: env.nativeConnection, taskQueue, stateDir, docker: false });
  host = { ...worker, stateDir, taskQueue, running: worker.worker.run() };
});
afterAll(async () => {
  host?.worker.shutdown();
  await host?.running;
  host?.close();
  await env?.teardown();
});

let runs = 0;
async function run(input: RunInput, taskQueue = host.taskQueue): Promise<{ id: string; runId: string; outcome: RunOutcome }> {
  const handle = await startRun(env.client, input, { taskQueue, workflowId: `${host.taskQueue}-${++runs}` });
  return { id: handle.workflowId, runId: handle.firstExecutionRunId, outcome: (await handle.result()) as RunOutcome };
}

const trace = (runId: string) => host.store.trace(runId);
const first = (events: TraceEvent[], type: string, where: (data: any) => boolean = () => true) =>
  events.find((e) => e.type === type && where(e.data))!;
/** The state a run recorded at the start of `turn` (its first request). */
const started = (events: TraceEvent[], turn: number) =>
  (first(events, 'model_requested', (d) => d.turn === turn && d.retry === undefined).data as { start: TurnState }).start;

/** Everything the host and Temporal keep of a run, to compare before and after a fork. */
async function snapshot(id: string, runId: string) {
  const paths = runPaths(host.stateDir, runId);
  const outcome = (await runHandle(env.client, id).result()) as RunOutcome;
  return {
    outcome,
    trace: trace(runId),
    receipts: host.ledger.receipts(runId),
    ledgerEntries: host.ledger.entries(runId),
    transcript: host.store.transcript(outcome.transcript),
    workspace: workspaceDigest(paths.workspace),
    baseline: workspaceDigest(paths.baseline),
    history: (await runHandle(env.client, id).fetchHistory()).events?.length,
  };
}

let canonical: { id: string; runId: string; outcome: RunOutcome };
const canonicalRun = async () => (canonical ??= await run(canonicalInput('canonical')));

describe('fork --at-turn N of the canonical run', () => {
  it('restores the workspace recorded after turn 4, goes on with the rest of the replay to completed, and leaves the run as it was', async () => {
    const original = await canonicalRun();
    expect(original.outcome.record).toEqual(CANONICAL_RECORD);
    const before = await snapshot(original.id, original.runId);
    const events = trace(original.runId);
    // After turn 4 (the test file written, the tests run red): what turn 5 started from, and what
    // the write of turn 5 was approved against (recorded by the write path itself).
    const recorded = started(events, 5).workspace_digest!;
    expect(recorded).toMatch(/^[0-9a-f]{64}$/);
    expect(first(events, 'approval_requested', (d) => d.path === 'src/linkcheck.py').data).toMatchObject({ workspace_digest: recorded });

    const fork = await run(await forkInput(env.client, original.id, 4));
    const forked = trace(fork.runId);
    expect(first(forked, 'run_started').data).toMatchObject({ forked_from: { workflow_id: original.id, turn: 4 } });
    expect(first(forked, 'fork_restored').data).toEqual({ workspace_digest: recorded, writes: 1 });
    expect(started(forked, 5).workspace_digest).toBe(recorded);
    expect(first(forked, 'approval_requested', (d) => d.path === 'src/linkcheck.py').data).toMatchObject({ workspace_digest: recorded });
    // Its own turns are 5 to 8: one write, its tests green, the same verified change.
    expect(fork.outcome.record).toEqual({
      ...CANONICAL_RECORD,
      writes: 1,
      receipts: 1,
      red_observed: false,
      tool_errors: {},
      tool_calls: 3,
      forked_from: { workflow_id: original.id, turn: 4 },
    });
    expect(host.ledger.receipts(fork.runId).map((r) => r.path)).toEqual(['src/linkcheck.py']);
    // The transcript: the run's first four turns, then the fork's; as a replay, the same decisions.
    const forkTranscript = host.store.transcript(fork.outcome.transcript);
    const firstFour = before.transcript.slice(0, 4);
    expect(forkTranscript.slice(0, 4)).toEqual(firstFour);
    expect(exportReplay(host.store, fork.outcome.transcript)).toEqual(exportReplay(host.store, original.outcome.transcript));
    expect(started(forked, 5).transcript).toEqual({ head: host.store.transcriptLinks(original.outcome.transcript)[3], pending: 0 });

    expect(await snapshot(original.id, original.runId)).toEqual(before);
  });

  it('forks before the first turn (the whole replay again) and after the last (the final workspace, nothing left to decide)', async () => {
    const original = await canonicalRun();
    const events = trace(original.runId);
    const atZero = await run(await forkInput(env.client, original.id, 0));
    expect(atZero.outcome.record).toEqual({ ...CANONICAL_RECORD, forked_from: { workflow_id: original.id, turn: 0 } });
    expect(first(trace(atZero.runId), 'fork_restored').data).toEqual({ workspace_digest: started(events, 1).workspace_digest, writes: 0 });

    const end = (first(events, 'run_finished').data as { end: TurnState }).end;
    expect(end.workspace_digest).toBe(workspaceDigest(runPaths(host.stateDir, original.runId).workspace));
    const atEnd = await run(await forkInput(env.client, original.id, 8));
    expect(first(trace(atEnd.runId), 'fork_restored').data).toEqual({ workspace_digest: end.workspace_digest, writes: 2 });
    expect(atEnd.outcome.record).toMatchObject({ status: 'failed', reason: 'replay_exhausted', turns: 9, writes: 0 });
    expect(exportReplay(host.store, atEnd.outcome.transcript)).toEqual(exportReplay(host.store, original.outcome.transcript));
  });

  it('forks a fork after its own turns, inheriting the writes it restored, and refuses to go back before the turn it started from', async () => {
    const original = await canonicalRun();
    const middle = await run(await forkInput(env.client, original.id, 4));
    const events = trace(original.runId);
    const again = await run(await forkInput(env.client, middle.id, 6));
    expect(first(trace(again.runId), 'fork_restored').data).toEqual({ workspace_digest: started(events, 7).workspace_digest, writes: 2 });
    expect(again.outcome.record).toMatchObject({
      status: 'completed',
      writes: 0,
      turns: 8,
      forked_from: { workflow_id: middle.id, turn: 6 },
    });

    const back = await run(await forkInput(env.client, middle.id, 2));
    expect(back.outcome.record).toMatchObject({ status: 'failed', reason: 'fork_unavailable', writes: 0 });
    expect(back.outcome.state.detail).toBe(
      `run ${middle.id} is a fork after turn 4: its turns up to there are its parent's; fork that run at turn 2`,
    );
  });
});

describe('a fork refused, with the reason, and nothing made', () => {
  const noFolder = (runId: string) => expect(existsSync(runPaths(host.stateDir, runId).root)).toBe(false);

  it('refuses a turn beyond the run, at the command line and on the worker', async () => {
    const original = await canonicalRun();
    await expect(forkInput(env.client, original.id, 9)).rejects.toThrow(
      `fork refused: ${original.id} has 8 turns, --at-turn 9 is beyond them`,
    );
    // A client that skipped the check: the worker refuses it before making anything.
    const input = await forkInput(env.client, original.id, 8);
    const forged = await run({ ...input, fork: { ...input.fork!, turn: 9 } });
    expect(forged.outcome.record).toMatchObject({ status: 'failed', reason: 'fork_unavailable', turns: 0 });
    expect(forged.outcome.state.detail).toBe(`run ${original.id} has 8 turns: turn 9 is beyond it`);
    noFolder(forged.runId);
  });

  it('refuses an unknown run', async () => {
    await expect(forkInput(env.client, 'no-such-run', 1)).rejects.toThrow('fork refused: there is no run no-such-run');
  });

  it('refuses a fork whose written content the store no longer holds, and one whose restored workspace has another digest', async () => {
    const original = await canonicalRun();
    const before = await snapshot(original.id, original.runId);
    const written = host.ledger.receipts(original.runId)[0];
    expect(written.path).toBe('tests/test_agent_nested.py');
    const bytes = host.store.content(written.after)!;
    const db = new Database(join(host.stateDir, 'store.sqlite'));
    try {
      db.prepare('DELETE FROM contents WHERE digest = ?').run(written.after);
    } finally {
      db.close();
    }
    const pruned = await run(await forkInput(env.client, original.id, 4));
    host.store.putContent(bytes);
    expect(pruned.outcome.record).toMatchObject({ status: 'failed', reason: 'fork_unavailable', turns: 0, writes: 0 });
    expect(pruned.outcome.state.detail).toBe(
      `this host's store no longer holds the content written to tests/test_agent_nested.py (${written.after}) by run ${original.id}`,
    );
    noFolder(pruned.runId);

    // The run's baseline changed since: the restored workspace is not the one recorded.
    const readme = join(runPaths(host.stateDir, original.runId).baseline, 'src', 'linkcheck.py');
    const kept = readFileSync(readme);
    appendFileSync(readme, '# changed behind the run\n');
    let mismatch;
    try {
      mismatch = await run(await forkInput(env.client, original.id, 4));
    } finally {
      writeFileSync(readme, kept);
    }
    expect(mismatch.outcome.record).toMatchObject({ status: 'failed', reason: 'fork_unavailable', writes: 0 });
    expect(mismatch.outcome.state.detail).toMatch(
      new RegExp(
        `^the workspace restored after turn 4 has the digest [0-9a-f]{64}, not ${started(before.trace, 5).workspace_digest} as the forked run recorded`,
      ),
    );
    noFolder(mismatch.runId);
    expect(await snapshot(original.id, original.runId)).toEqual(before);
  });

  it('refuses on a host that did not run it', async () => {
    const original = await canonicalRun();
    const taskQueue = uniqueQueue('other-host');
    const other = await createWorker({ connection: env.nativeConnection, taskQueue, stateDir: tempDir('other-host'), docker: false });
    try {
      const elsewhere = await other.worker.runUntil(async () => run(await forkInput(env.client, original.id, 4), taskQueue));
      expect(elsewhere.outcome.record).toMatchObject({ status: 'failed', reason: 'fork_unavailable' });
      expect(elsewhere.outcome.state.detail).toBe(
        `this host's store has no trace of run ${original.id}: it ran on another host, or the store was pruned`,
      );
    } finally {
      other.close();
    }
  });
});

describe('a fork of a live run', () => {
  const serve = servedPerTest();
  const KEY_ENV = 'AGENT_TEST_FORK_KEY';
  process.env[KEY_ENV] = 'sk-test-fork-3b9d';

  it("goes on with the same model from the run's first turns: its first request carries their conversation", async () => {
    await requireDockerSandbox();
    // The canonical session, one call a reply; the fork after turn 3 is answered from reply 4 on.
    const decisions = JSON.parse(readFileSync(join(LINKCHECK, 'replays', 'canonical.json'), 'utf8')).decisions as {
      kind: string;
      text?: string;
      call?: ReplyCall & { call_id: string };
    }[];
    const calls = decisions
      .filter((d) => d.kind === 'tool')
      .map((d) => ({ id: d.call!.call_id, name: d.call!.name, arguments: d.call!.arguments }));
    const replies: { text?: string; calls?: ReplyCall[] }[] = [
      { text: decisions[0].text, calls: [calls[0]] },
      ...calls.slice(1).map((c) => ({ calls: [c] })),
      { text: decisions.at(-1)!.text },
    ];
    const server = await serve((_req, i) => ({ body: reply('openai', replies[i < replies.length ? i : i - replies.length + 3]) }));
    const providers = join(tempDir('fork-providers'), 'providers.json');
    const stateDir = tempDir('fork-live');
    const taskQueue = uniqueQueue('fork-live');
    const worker = await createWorker({ connection: env.nativeConnection, taskQueue, stateDir, providersFile: providers });
    try {
      await worker.worker.runUntil(async () => {
        const input: RunInput = {
          fixture: LINKCHECK,
          source: { kind: 'provider', endpoint: addEndpoint(providers, endpointOf('openai', server, KEY_ENV)), model: 'test-model' },
          backend: 'docker',
          approver: 'policy:approve-writable',
        };
        const original = await run(input, taskQueue);
        expect(original.outcome.record).toMatchObject({ status: 'completed', turns: 7, usage: { model_calls: 7 } });
        const fork = await run(await forkInput(env.client, original.id, 3), taskQueue);
        expect(fork.outcome.record).toMatchObject({
          status: 'completed',
          writes: 1,
          turns: 7,
          usage: { model_calls: 4 },
          prompt: original.outcome.record.prompt,
          forked_from: { workflow_id: original.id, turn: 3 },
        });
        expect(server.count()).toBe(11);
        // The system prompt and the conversation of turns 1-3 as the run's fourth request had them; the run state is the fork's own.
        const conversation = (i: number) => {
          const [system, , ...rest] = server.requests[i].body.messages;
          return {
            system,
            rest: JSON.parse(JSON.stringify(rest).replace(/in \d+\.\d+s/g, 'in N.NNs')),
            key: server.requests[i].body.prompt_cache_key,
          };
        };
        expect(conversation(7)).toEqual(conversation(3));
        expect(worker.ledger.receipts(fork.runId).map((r) => r.path)).toEqual(['src/linkcheck.py']);
      });
    } finally {
      worker.close();
    }
  });
});
