/**
 * Records the workflow histories that tests/replay-histories.test.ts replays against the current
 * workflow code (`npm run histories:record`). Each run goes through a real Temporal dev server
 * and a real worker; its history is written to fixtures/histories/<name>.json in the proto-JSON
 * form of `temporal workflow show -o json`.
 *
 * Hazard: a history is only a useful guard if it is portable. Inputs therefore name the fixture
 * and replays relative to the project root (the worker's working directory), and every payload is
 * decoded and searched for absolute machine paths before anything is written: any one of them
 * (project, home, temp or the worker's state folder) refuses the recording.
 */
import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import type { RunInput, RunRecord } from '../core/contracts';
import { historyToJSON } from '@temporalio/common/lib/proto-utils';
import { PROJECT_ROOT, tempDir, SETTINGS } from './support/run-dir';
import { approveAll, startServer } from './support/temporal';
import { createWorker } from '../worker';
import { startRunWithArgs } from '../client/run-access';

const HISTORIES = join(PROJECT_ROOT, 'fixtures', 'histories');
const TASK_QUEUE = 'record-histories';
const FIXTURE = 'fixtures/linkcheck-nested';

interface Recording {
  name: string;
  input: RunInput;
  /** Drives the run while it is open (the canonical run is approved through the real Signal). */
  drive?: (handle: WorkflowHandle) => Promise<unknown>;
  /** The outcome this history must show; a run that ends otherwise is not recorded. */
  expect: Partial<RunRecord>;
}

function replayInput(replayPath: string, overrides: Partial<RunInput> = {}): RunInput {
  return {
    fixture: FIXTURE,
    source: { kind: 'replay', path: replayPath, trusted: true },
    backend: 'local',
    approver: 'policy:approve-writable',
    ...overrides,
  };
}
const linkcheckReplay = (name: string) => `${FIXTURE}/replays/${name}.json`;

const RECORDINGS: Recording[] = [
  {
    name: 'canonical',
    input: replayInput(linkcheckReplay('canonical'), { approver: 'interactive' }),
    drive: (handle) => approveAll(handle, 'user:recorder'),
    expect: { status: 'completed', writes: 2, receipts: 2 },
  },
  {
    name: 'always-empty',
    input: replayInput(linkcheckReplay('always-empty')),
    expect: { status: 'failed', reason: 'verification_failed' },
  },
  { name: 'no-work', input: replayInput(linkcheckReplay('no-work')), expect: { status: 'failed', writes: 0 } },
  {
    name: 'untrusted-replay',
    input: { ...replayInput(linkcheckReplay('canonical')), source: { kind: 'replay', path: linkcheckReplay('canonical'), trusted: false } },
    expect: { status: 'failed', reason: 'replay_untrusted', writes: 0 },
  },
  {
    name: 'model-error-transient-then-permanent',
    input: replayInput('fixtures/histories/replays/model-error-transient-then-permanent.json'),
    expect: { status: 'failed', reason: 'model_error' },
  },
];

interface Leak {
  prefix: string;
  where: string;
  excerpt: string;
}

type HistoryJson = { events: Array<Record<string, unknown> & { eventId: string; eventType: string }> };

/**
 * Absolute machine paths in a history, searched in plain strings and in decoded payloads (payload
 * data is base64 in proto JSON, so a plain grep of the file would miss them). Each hit names the
 * event and, for activity events, the activity type.
 */
function leaks(history: HistoryJson, forbidden: string[]): Leak[] {
  const activityOf = new Map<string, string>();
  for (const e of history.events) {
    const scheduled = e.activityTaskScheduledEventAttributes as { activityType?: { name?: string } } | undefined;
    if (scheduled?.activityType?.name) activityOf.set(e.eventId, scheduled.activityType.name);
  }
  const found: Leak[] = [];
  const check = (text: string, where: string) => {
    const hits = forbidden.map((prefix) => ({ prefix, at: text.indexOf(prefix) })).filter((h) => h.at >= 0);
    if (hits.length === 0) return;
    const { prefix, at } = hits.reduce((a, b) => (b.at < a.at || (b.at === a.at && b.prefix.length > a.prefix.length) ? b : a));
    found.push({ prefix, where, excerpt: text.slice(Math.max(0, at - 60), at + 100) });
  };
  const walk = (value: unknown, where: string): void => {
    if (typeof value === 'string') return check(value, where);
    if (Array.isArray(value)) return value.forEach((v) => walk(v, where));
    if (value === null || typeof value !== 'object') return;
    const record = value as Record<string, unknown>;
    if (typeof record.data === 'string' && typeof record.metadata === 'object')
      check(Buffer.from(record.data, 'base64').toString('utf8'), `${where} payload`);
    for (const v of Object.values(record)) walk(v, where);
  };
  for (const e of history.events) {
    const attrs = Object.entries(e).find(([key]) => key.endsWith('EventAttributes'))?.[1] as { scheduledEventId?: string } | undefined;
    const activity = activityOf.get(e.eventId) ?? activityOf.get(attrs?.scheduledEventId ?? '');
    walk(e, `event ${e.eventId} ${e.eventType.replace('EVENT_TYPE_', '')}${activity ? ` (${activity})` : ''}`);
  }
  return found;
}

async function record(): Promise<void> {
  // Relative fixture and replay paths in the inputs resolve against the worker's working directory.
  process.chdir(PROJECT_ROOT);
  const stateDir = tempDir('record-histories');
  const forbidden = [...new Set([PROJECT_ROOT, stateDir, tmpdir(), homedir(), '/work/', '/root/', '/tmp/'])];
  const env = await startServer();
  // The recorded runs are on the local backend: this worker's operator allows it.
  const { worker, close } = await createWorker({
    connection: env.nativeConnection,
    taskQueue: TASK_QUEUE,
    stateDir,
    settings: { ...SETTINGS, allowLocal: true },
  });
  try {
    const recorded = await worker.runUntil(async () => {
      const out: Array<{ name: string; json: string; leaks: Leak[] }> = [];
      for (const rec of RECORDINGS) {
        const handle = await startRunWithArgs(env.client, [rec.input], { taskQueue: TASK_QUEUE, workflowId: rec.name });
        const driven = rec.drive?.(handle);
        const outcome = await handle.result();
        await driven;
        const mismatch = Object.entries(rec.expect).filter(([key, want]) => outcome.record[key as keyof RunRecord] !== want);
        if (mismatch.length > 0) {
          throw new Error(
            `${rec.name}: expected ${JSON.stringify(rec.expect)}, the run ended with ${JSON.stringify(outcome.record)}; nothing was written`,
          );
        }
        const json = historyToJSON(await handle.fetchHistory());
        out.push({ name: rec.name, json, leaks: leaks(JSON.parse(json) as HistoryJson, forbidden) });
        console.error(`recorded ${rec.name}: ${outcome.record.status}${outcome.record.reason ? ` / ${outcome.record.reason}` : ''}`);
      }
      return out;
    });

    // An absolute path means a recording that only works on this machine: refuse it.
    const fatal = recorded.flatMap((r) => r.leaks.map((l) => ({ name: r.name, ...l })));
    if (fatal.length > 0) {
      throw new Error(
        `absolute machine paths in the histories; nothing was written:\n${fatal.map((l) => `  ${l.name}: ${l.where}: ...${l.excerpt}...`).join('\n')}`,
      );
    }
    // Replace the whole set, so a recording that was dropped from the list does not linger.
    mkdirSync(HISTORIES, { recursive: true });
    for (const file of readdirSync(HISTORIES)) if (file.endsWith('.json')) rmSync(join(HISTORIES, file));
    for (const { name, json } of recorded) {
      writeFileSync(join(HISTORIES, `${name}.json`), `${json}\n`);
      console.log(`fixtures/histories/${name}.json (${Buffer.byteLength(json) + 1} bytes)`);
    }
  } finally {
    close();
    await env.teardown();
    rmSync(stateDir, { recursive: true, force: true });
  }
}

record().catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
