/**
 * Long sessions on a real Temporal server: whole files read and kept in the host store while
 * history carries digests and views, continue-as-new across a 300-turn run with approvals that
 * cross the boundary, and a replay read once at the start. The server suggests continue-as-new
 * from 400 events (instead of 4,096), so the boundaries come after a few dozen turns.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { temporalBinary } from '../host/temporal-bin';
import { canonicalJson } from '../core/canonical';
import type { ToolResult } from '../core/contracts';
import type { RunView } from '../core/run-view';
import { MAX_PAYLOAD_BYTES } from '../worker/payload-guard';
import { addEndpoint, endpointOf, ProviderServer, reply } from './helpers/provider-server';
import { LINKCHECK, tempDir, writeFiles, SETTINGS } from './helpers/run-dir';
import {
  CANONICAL_RECORD,
  canonicalInput,
  approveAll,
  pendingApproval,
  runOnce,
  startServer,
  waitFor,
  writeReplay,
} from './helpers/temporal';
import { queryState, queryTrace, sendApproval } from '../client/run-access';
import { startConsole } from '../client/console/server';
import { SseClient } from './helpers/sse';

const exec = promisify(execFile);
const SUGGEST_CAN_EVENTS = 400;

let env: TestWorkflowEnvironment;
beforeAll(async () => {
  env = await startServer(['--dynamic-config-value', `limit.historyCount.suggestContinueAsNew=${SUGGEST_CAN_EVENTS}`]);
});
afterAll(async () => {
  await env?.teardown();
});

const sha256 = (data: string) => createHash('sha256').update(data).digest('hex');
const read = (callId: string, path: string, range: { start?: number; end?: number } = {}) => ({
  kind: 'tool',
  call: { call_id: callId, name: 'read_file', arguments: { path, ...range } },
});

interface HistoryFacts {
  runs: number;
  events: number;
  bytes: number;
  largestPayload: number;
}

/** Every run of a workflow id as `temporal workflow show -o json` prints it, and the sizes of its payloads. */
async function historyFacts(workflowId: string): Promise<HistoryFacts> {
  const cli = (...args: string[]) =>
    exec(temporalBinary(SETTINGS), [...args, '--address', env.address, '-o', 'json'], { maxBuffer: 256 * 1024 * 1024 });
  const listed = JSON.parse((await cli('workflow', 'list', '--query', `WorkflowId="${workflowId}"`)).stdout) as {
    execution: { runId: string };
  }[];
  const facts: HistoryFacts = { runs: listed.length, events: 0, bytes: 0, largestPayload: 0 };
  for (const { execution } of listed) {
    const { stdout } = await cli('workflow', 'show', '--workflow-id', workflowId, '--run-id', execution.runId);
    facts.bytes += Buffer.byteLength(stdout);
    const history = JSON.parse(stdout) as { events: unknown[] };
    facts.events += history.events.length;
    const walk = (v: unknown): void => {
      if (v === null || typeof v !== 'object') return;
      const o = v as Record<string, unknown>;
      if (typeof o.data === 'string' && typeof o.metadata === 'object') {
        facts.largestPayload = Math.max(facts.largestPayload, Buffer.from(o.data, 'base64').length);
        return;
      }
      Object.values(o).forEach(walk);
    };
    walk(history);
  }
  return facts;
}

/** A Python repository of 40 modules of 48 KB each; `mods/m17.py` subtracts where it should add. */
function bigFixture(): { fixture: string; sources: Record<string, string> } {
  const fixture = tempDir('big-fixture');
  const sources: Record<string, string> = {};
  for (let i = 0; i < 40; i++) {
    const name = `src/mods/m${String(i).padStart(2, '0')}.py`;
    const lines = [`"""Module ${i}: generated filler, read whole by the replay."""`, ''];
    for (let n = 0; Buffer.byteLength(lines.join('\n')) < 48 * 1024 - 200; n++) lines.push(`# filler ${i}.${n}: ${'x'.repeat(60)}`);
    lines.push('', '', i === 17 ? 'def add(a, b):\n    return a - b\n' : `def value():\n    return ${i}\n`);
    sources[name] = lines.join('\n');
  }
  writeFiles(join(fixture, 'repo'), {
    ...sources,
    'tests/test_m17.py':
      'import sys\nfrom pathlib import Path\n\nsys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))\n\nfrom mods.m17 import add  # noqa: E402\n\n\ndef test_add():\n    assert add(2, 3) == 5\n',
  });
  writeFiles(fixture, {
    'fixture.json': JSON.stringify({
      schema_version: 1,
      id: 'forty-modules',
      task: 'add() in src/mods/m17.py subtracts. Fix it.',
      writable: ['src/mods/m17.py'],
      new_files: [],
      tests: { command: ['python3', '-m', 'pytest', '-q', '-p', 'no:cacheprovider', 'tests'], format: 'pytest', timeout_s: 60 },
      acceptance: { command: ['python3', '{acceptance}/check.py'], timeout_s: 60 },
      budgets: { max_turns: 60, max_tool_calls: 60, deadline_s: 900, call_timeout_s: 120 },
    }),
    'acceptance/check.py':
      'import json, os, sys\nsys.path.insert(0, os.path.join(os.getcwd(), "src"))\nfrom mods.m17 import add\n' +
      'print(json.dumps({"schema_version": 1, "cases": [{"id": "add", "actual": add(2, 3), "error": None}, {"id": "add_negative", "actual": add(-1, -1), "error": None}]}))\n',
    'acceptance/expected.json': JSON.stringify({ schema_version: 1, cases: { add: 5, add_negative: -2 } }),
  });
  return { fixture, sources };
}

describe('a session that reads 40 files of 48 KB whole', () => {
  it('completes with every history payload under 64 KiB and the file contents in the host store', async () => {
    const { fixture, sources } = bigFixture();
    const names = Object.keys(sources);
    const path = writeReplay([
      { kind: 'plan', text: 'Read every module, then fix add().' },
      ...names.map((name, i) => read(`read-${i}`, name)),
      {
        kind: 'tool',
        call: {
          call_id: 'fix',
          name: 'apply_patch',
          arguments: {
            path: 'src/mods/m17.py',
            version: sha256(sources['src/mods/m17.py']),
            old: '    return a - b\n',
            new: '    return a + b\n',
          },
        },
      },
      { kind: 'tool', call: { call_id: 'green', name: 'run_tests', arguments: { preset: 'candidate_tests' } } },
      { kind: 'final', text: 'add() adds.' },
    ]);
    const { outcome, trace, handle } = await runOnce(env, {
      fixture,
      source: { kind: 'replay', path, trusted: true },
      approver: 'policy:approve-writable',
    });
    expect(outcome.record).toMatchObject({
      status: 'completed',
      writes: 1,
      receipts: 1,
      diff_paths: ['src/mods/m17.py'],
      candidate_tests: { discovered: 1, passed: 1, failed: 0 },
    });

    // The store holds each whole file; history holds views of them.
    const reads = trace
      .filter((e) => e.type === 'tool_observed' && e.call_id?.startsWith('read-'))
      .map((e) => e.data as ToolResult & { data: { text: string } });
    expect(reads).toHaveLength(40);
    reads.forEach((r, i) => expect(r).toMatchObject({ ok: true, truncated: false, data: { text: sources[names[i]] } }));

    const facts = await historyFacts(handle.workflowId);
    console.log(
      `40 x 48 KB reads: ${facts.runs} run(s), ${facts.events} events, ${facts.bytes} bytes of history JSON, largest payload ${facts.largestPayload} bytes`,
    );
    expect(facts.largestPayload).toBeLessThanOrEqual(MAX_PAYLOAD_BYTES);
    // 1.9 MB was read; the history carries views of it, not the files.
    expect(facts.bytes).toBeLessThan(Object.values(sources).join('').length);
  });
});

describe('a 300-turn run across continue-as-new', () => {
  it('carries counters, trace numbering and pending approvals across segments and writes exactly twice', async () => {
    const canonical = JSON.parse(readFileSync(join(LINKCHECK, 'replays', 'canonical.json'), 'utf8')).decisions as {
      call?: { call_id: string };
    }[];
    const step = (id: string) => canonical.find((d) => d.call?.call_id === id)!;
    const reads = (from: number, n: number) =>
      Array.from({ length: n }, (_, i) => read(`read-${from + i}`, 'src/linkcheck.py', { start: 1, end: 2 }));
    const decisions = [
      canonical[0],
      ...reads(0, 140),
      step('add-test'),
      step('run-red'),
      step('fix-source'),
      ...reads(140, 154),
      step('run-green'),
      canonical.at(-1),
    ];
    expect(decisions).toHaveLength(300);
    const path = writeReplay(decisions);

    const ignored = (p: { action_id: string; workspace_digest: string }) => ({
      action_id: p.action_id,
      decision: 'approve' as const,
      args_digest: '0'.repeat(64),
      workspace_digest: p.workspace_digest,
    });
    const valid = (p: { action_id: string; args_digest: string; workspace_digest: string }) => ({
      action_id: p.action_id,
      decision: 'approve' as const,
      args_digest: p.args_digest,
      workspace_digest: p.workspace_digest,
      principal: 'user:test',
    });
    let first: RunView['pending_approval'] = null;
    const { outcome, trace, receipts, handle } = await runOnce(
      env,
      canonicalInput('canonical', {
        source: { kind: 'replay', path, trusted: true },
        approver: 'interactive',
        budgets: { max_turns: 320, max_tool_calls: 320 },
      }),
      {
        drive: async (h) => {
          // The first write waits while approvals with wrong digests pile up: history grows past
          // the suggestion, the wait continues as new, and the approval is sent to the next segment.
          first = await pendingApproval(h);
          const segment = (await queryState(h)).segment;
          // Signals Temporal takes in one workflow task add fewer events: send until the history is long enough.
          await waitFor('the wait to continue as new', async () => {
            const view = await queryState(h);
            if (view.segment > segment && view.status === 'awaiting_approval') return true;
            for (let i = 0; i < 50; i++) await sendApproval(h, ignored(first!));
            return false;
          });
          await sendApproval(h, valid(first));
          // The second approval goes out in the middle of such a burst, whichever segment gets it.
          const second = await pendingApproval(h, first.action_id);
          // 300 ignored Signals are 300 events after the first boundary, and the 154 reads after the
          // write add more: at least one more boundary follows.
          for (let i = 0; i < 320; i++) await sendApproval(h, i === 300 ? valid(second) : ignored(second));
        },
      },
    );

    // The same read asked again with no write in between is a repeated call: 139 before the first write, 153 after the second.
    expect(outcome.record).toEqual({ ...CANONICAL_RECORD, replay: 'scripted', turns: 300, tool_calls: 298, repeated_calls: 292 });
    expect(receipts).toHaveLength(2);
    expect(outcome.state.counters).toMatchObject({ turns: 300, tool_calls: 298, writes: 2, receipts: 2 });
    // The wait's boundary, and one more from the burst and the reads (local activities add few
    // events per read, so how many more depends on how they group into workflow tasks).
    expect(outcome.state.segment).toBeGreaterThanOrEqual(3);
    // One trace, numbered 1..N across every segment, every call answered once.
    expect(trace.map((e) => e.seq)).toEqual(trace.map((_, i) => i + 1));
    const proposed = trace.filter((e) => e.type === 'tool_proposed').map((e) => e.call_id);
    expect(trace.filter((e) => e.type === 'tool_observed').map((e) => e.call_id)).toEqual(proposed);
    // The first approval crossed a boundary: requested in one segment, recorded in a later one.
    const id = first!.action_id;
    const carriedAt = trace.find(
      (e) => e.type === 'continued_as_new' && (e.data as { pending_action: string | null }).pending_action === id,
    )!;
    const requested = trace.find((e) => e.type === 'approval_requested' && e.action_id === id)!;
    const recorded = trace.filter((e) => e.type === 'approval_recorded' && e.action_id === id);
    expect(recorded).toHaveLength(1);
    expect(requested.seq).toBeLessThan(carriedAt.seq);
    expect(carriedAt.seq).toBeLessThan(recorded[0].seq);
    expect(trace.filter((e) => e.type === 'action_written')).toHaveLength(2);

    const facts = await historyFacts(handle.workflowId);
    console.log(
      `300 turns: ${facts.runs} runs, ${facts.events} events (${(facts.events / 300).toFixed(1)} per turn), ${facts.bytes} bytes of history JSON, largest payload ${facts.largestPayload} bytes`,
    );
    expect(facts.largestPayload).toBeLessThanOrEqual(MAX_PAYLOAD_BYTES);
  });
});

describe('the replay is read once', () => {
  it('keeps running the replay it started with when the file changes on disk mid-run', async () => {
    const original = readFileSync(join(LINKCHECK, 'replays', 'canonical.json'), 'utf8');
    const path = join(tempDir('replay'), 'canonical.json');
    writeFileSync(path, original);
    const { outcome, trace } = await runOnce(
      env,
      canonicalInput('canonical', { source: { kind: 'replay', path, trusted: true }, approver: 'interactive' }),
      {
        drive: async (h) => {
          await pendingApproval(h);
          writeFileSync(path, JSON.stringify({ schema_version: 1, decisions: [{ kind: 'final', text: 'changed on disk' }] }));
          await approveAll(h);
        },
      },
    );
    expect(outcome.record).toEqual(CANONICAL_RECORD);
    expect(outcome.state.replay_digest).toBe(sha256(canonicalJson(JSON.parse(original))));
    expect(JSON.stringify(trace)).not.toContain('changed on disk');
  });
});

describe('a live reply across continue-as-new', () => {
  it('carries the rest of a reply whose write waits through a continue-as-new, so every call of it runs and is answered', async () => {
    process.env.AGENT_TEST_LONG_KEY = 'sk-test-long';
    const canonical = JSON.parse(readFileSync(join(LINKCHECK, 'replays', 'canonical.json'), 'utf8')).decisions as {
      kind: string;
      text?: string;
      call?: { call_id: string; name: string; arguments: unknown };
    }[];
    const calls = canonical
      .filter((d) => d.kind === 'tool')
      .map((d) => ({ id: d.call!.call_id, name: d.call!.name, arguments: d.call!.arguments }));
    const addTest = calls.find((c) => c.id === 'add-test')!;
    // First reply: the new test file, then a read in the same reply; afterwards the rest of the canonical session.
    const replies = [
      { calls: [addTest, { id: 'after-patch', name: 'read_file', arguments: { path: 'src/linkcheck.py', start: 1, end: 2 } }] },
      ...calls.filter((c) => c.id !== 'add-test' && c.id !== 'read-source').map((c) => ({ calls: [c] })),
      { text: 'done' },
    ];
    const server = await new ProviderServer((_req, i) => ({ body: reply('openai', replies[i] ?? { text: 'done' }) })).start();
    try {
      const ignored = (p: { action_id: string; workspace_digest: string }) => ({
        action_id: p.action_id,
        decision: 'approve' as const,
        args_digest: '0'.repeat(64),
        workspace_digest: p.workspace_digest,
      });
      const providersFile = join(tempDir('providers'), 'providers.json');
      const endpoint = addEndpoint(providersFile, endpointOf('openai', server, 'AGENT_TEST_LONG_KEY'));
      const { outcome, trace } = await runOnce(
        env,
        { fixture: LINKCHECK, source: { kind: 'provider', endpoint, model: 'test-model' }, backend: 'docker', approver: 'interactive' },
        {
          providersFile,
          drive: async (h) => {
            const first = await pendingApproval(h);
            const segment = (await queryState(h)).segment;
            // Signals Temporal takes in one workflow task add fewer events: send until the history is long enough.
            await waitFor('the wait to continue as new', async () => {
              for (let i = 0; i < 50; i++) await sendApproval(h, ignored(first));
              return (await queryState(h)).segment > segment;
            });
            await approveAll(h);
          },
        },
      );
      expect(outcome.record).toMatchObject({ status: 'completed', writes: 2, receipts: 2 });
      const carried = trace.find(
        (e) => e.type === 'continued_as_new' && (e.data as { pending_action: string | null }).pending_action !== null,
      )!;
      const answered = trace.find((e) => e.type === 'tool_observed' && e.call_id === 'after-patch')!;
      expect(answered.data).toMatchObject({ ok: true });
      expect(answered.seq).toBeGreaterThan(carried.seq);
      // The next request answered both calls of the first reply (the server refuses a conversation that does not).
      const second = server.requests[1].body.messages as { role: string; tool_call_id?: string }[];
      expect(second.filter((m) => m.role === 'tool').map((m) => m.tool_call_id)).toEqual(['add-test', 'after-patch']);
    } finally {
      await server.close();
    }
  });
});

describe('the event stream of a run that continued as new', () => {
  /** A server that suggests continue-as-new early: the first write's approval wait is past it, every step before it is not. */
  const EARLY_CAN_EVENTS = 60;

  it('gives a client connecting while the new segment waits, with no event in its memory yet, every event from the host store', async () => {
    const early = await startServer(['--dynamic-config-value', `limit.historyCount.suggestContinueAsNew=${EARLY_CAN_EVENTS}`]);
    let stateDir = '';
    const token = 'long-runs-stream-token-0123456789-012';
    const canonical = JSON.parse(readFileSync(join(LINKCHECK, 'replays', 'canonical.json'), 'utf8')).decisions as unknown[];
    // One chain of local activities (a decision and a read each turn, fewer than 64 in all) up to
    // the first write: the run decides to continue as new by what it read at the chain's start,
    // so only the approval wait, after preparePatch, finds the suggestion.
    const path = writeReplay([
      canonical[0],
      ...Array.from({ length: 25 }, (_, i) => read(`look-${i}`, 'src/linkcheck.py', { start: 1, end: 5 + i })),
      ...canonical.slice(1),
    ]);
    try {
      const { outcome } = await runOnce(
        early,
        canonicalInput('canonical', {
          source: { kind: 'replay', path, trusted: true },
          approver: 'interactive',
          budgets: { max_turns: 60, max_tool_calls: 60 },
        }),
        {
          prepareState: (dir) => void (stateDir = dir),
          drive: async (h) => {
            const pending = await waitFor('the wait in the second segment', async () => {
              const view = await queryState(h);
              return view.segment === 2 && view.status === 'awaiting_approval' ? view.pending_approval : null;
            });
            const memory = await queryTrace(h, { after: 0 });
            expect({ events: memory.events.length, oldest: memory.oldest }).toEqual({ events: 0, oldest: null });
            const app = await startConsole({
              client: early.client,
              token: 'long-runs-stream-console-token',
              host: '127.0.0.1',
              port: 0,
              webUi: null,
              namespace: 'default',
              stateDir,
              apiTokens: new Map([['bot', token]]),
            });
            const stream = new SseClient(`${app.url}/api/runs/${encodeURIComponent(h.workflowId)}/events?v=2`, {
              authorization: `Bearer ${token}`,
            });
            try {
              stream.connect();
              await stream.waitFor('the pending write', (f) => f.event === 'card' && f.data.action_id === pending!.action_id);
              const seqs = stream.events().map((e) => e.seq);
              expect(seqs).toEqual(Array.from({ length: memory.newest }, (_, i) => i + 1));
              expect(stream.frames.filter((f) => f.event === 'fault')).toEqual([]);
            } finally {
              stream.cut();
              await app.close();
            }
            await approveAll(h);
          },
        },
      );
      expect(outcome.record).toMatchObject({ status: 'completed', writes: 2, receipts: 2 });
      expect(outcome.state.segment).toBeGreaterThanOrEqual(2);
    } finally {
      await early.teardown();
    }
  });
});
