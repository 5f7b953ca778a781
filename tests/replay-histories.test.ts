/**
 * The determinism guard: every committed history under fixtures/histories/ (recorded with
 * `npm run histories:record`, and under found/ the histories of runs that went wrong elsewhere,
 * kept as they were) must replay against the current workflow code, in both bundles (the
 * traced one with OpenTelemetry's interceptors, the plain one without: worker/index.ts), and a
 * history the code no longer matches must be detected as a DeterminismViolationError, not as any
 * failure.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { Worker, type ReplayWorkerOptions } from '@temporalio/worker';
import { DeterminismViolationError } from '@temporalio/workflow';
import { workflowBundle, type BundleKind } from '../worker';
import { installRuntime } from '../host/runtime';
import { workerTelemetry } from '../worker/telemetry';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils';
import { PROJECT_ROOT } from './helpers/run-dir';

type HistoryEvent = Record<string, any>;
type HistoryJson = { events: HistoryEvent[] };

const HISTORIES = join(PROJECT_ROOT, 'fixtures', 'histories');
const jsonIn = (dir: string) =>
  readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .map((f) => basename(f, '.json'))
    .sort();
const recorded = jsonIn(HISTORIES);
const found = jsonIn(join(HISTORIES, 'found')).map((name) => `found/${name}`);
const names = [...recorded, ...found];
const load = (name: string): HistoryJson => JSON.parse(readFileSync(join(HISTORIES, `${name}.json`), 'utf8'));

let options: ReplayWorkerOptions;
const bundles = {} as Record<BundleKind, ReplayWorkerOptions>;
beforeAll(async () => {
  // The negative tests make Core warn about the nondeterminism they provoke; keep the output to errors.
  installRuntime('ERROR');
  // The workflow spans' sink as a worker registers it (it drops them while replaying).
  for (const kind of ['traced', 'plain'] as const)
    bundles[kind] = { workflowBundle: await workflowBundle(kind), sinks: workerTelemetry(null).sinks };
  options = bundles.traced;
});

/** Replays one history and returns its error (undefined when it replayed cleanly). */
async function replayError(json: HistoryJson, workflowId: string) {
  const results = [];
  for await (const result of Worker.runReplayHistories(options, [{ workflowId, history: historyFromJSON(json) }])) results.push(result);
  expect(results).toHaveLength(1);
  return results[0].error;
}

/**
 * Removes events as if the old workflow version never issued their commands, renumbering the
 * remaining events and every `...EventId` reference so the history stays well formed.
 */
function dropEvents(json: HistoryJson, drop: (e: HistoryEvent) => boolean): HistoryJson {
  const kept = json.events.filter((e) => !drop(e));
  const newId = new Map(kept.map((e, i) => [String(e.eventId), String(i + 1)]));
  const renumber = (value: unknown): unknown => {
    if (Array.isArray(value)) return value.map(renumber);
    if (value === null || typeof value !== 'object') return value;
    return Object.fromEntries(
      Object.entries(value).map(([key, v]) => [
        key,
        key.endsWith('EventId') && typeof v === 'string' && newId.has(v) ? newId.get(v) : renumber(v),
      ]),
    );
  };
  return { events: kept.map((e) => ({ ...(renumber(e) as HistoryEvent), eventId: newId.get(String(e.eventId)) })) };
}

describe('committed histories', () => {
  it('include the canonical run and the failure runs', () => {
    expect(names).toEqual(
      expect.arrayContaining(['canonical', 'always-empty', 'no-work', 'untrusted-replay', 'model-error-transient-then-permanent']),
    );
  });

  it("include a run whose reply-event marker an answered Query moved into the workflow task after its local activity's", () => {
    const { events } = load('found/reply-event-after-query');
    const marker = (e: HistoryEvent) => e.markerRecordedEventAttributes?.markerName as string | undefined;
    const patchId = (e: HistoryEvent) =>
      marker(e) === 'core_patch'
        ? (
            JSON.parse(Buffer.from(e.markerRecordedEventAttributes.details['patch-data'].payloads[0].data, 'base64').toString('utf8')) as {
              id: string;
            }
          ).id
        : null;
    const at = events.findIndex((e) => patchId(e) === 'reply-event');
    // The workflow task before it ended with the local decision's marker; a new one was forced at once.
    expect(events.slice(at - 4, at + 1).map((e) => marker(e) ?? e.eventType)).toEqual([
      'core_local_activity',
      'EVENT_TYPE_WORKFLOW_TASK_SCHEDULED',
      'EVENT_TYPE_WORKFLOW_TASK_STARTED',
      'EVENT_TYPE_WORKFLOW_TASK_COMPLETED',
      'core_patch',
    ]);
  });

  it.each(['traced', 'plain'] as const)('all replay against the current workflow code without an error (%s bundle)', async (kind) => {
    const results = [];
    const histories = names.map((name) => ({ workflowId: name, history: historyFromJSON(load(name)) }));
    for await (const { workflowId, error } of Worker.runReplayHistories(bundles[kind], histories))
      results.push({ workflowId, error: error?.message ?? null });
    expect(results).toEqual(names.map((workflowId) => ({ workflowId, error: null })));
  });
});

describe('a workflow change made without patched() is detected on replay', () => {
  it('detects an activity the old version scheduled under another type', async () => {
    const json = load('canonical');
    const prepare = json.events.find((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'prepareWorkspace')!;
    prepare.activityTaskScheduledEventAttributes.activityType.name = 'prepareSandbox';
    const error = await replayError(json, 'canonical-other-activity');
    expect(error).toBeInstanceOf(DeterminismViolationError);
    expect(error!.message).toContain(
      "Activity type of scheduled event 'prepareSandbox' does not match activity type of activity command 'prepareWorkspace'",
    );
  });

  it('detects a local activity the old version ran under another type (a read-only step)', async () => {
    const json = load('canonical');
    const marker = json.events.find((e) => e.markerRecordedEventAttributes?.markerName === 'core_local_activity')!;
    const payload = marker.markerRecordedEventAttributes.details.data.payloads[0];
    const data = JSON.parse(Buffer.from(payload.data, 'base64').toString('utf8')) as { activity_type: string };
    expect(data.activity_type).toBe('localDecide');
    payload.data = Buffer.from(JSON.stringify({ ...data, activity_type: 'decide' })).toString('base64');
    const error = await replayError(json, 'canonical-other-local-activity');
    expect(error).toBeInstanceOf(DeterminismViolationError);
    expect(error!.message).toContain(
      "Activity type of recorded marker 'decide' does not match activity type of local activity command 'localDecide'",
    );
  });

  it('detects a timer the old version did not start (the run deadline)', async () => {
    const error = await replayError(
      dropEvents(load('no-work'), (e) => e.eventType.startsWith('EVENT_TYPE_TIMER_')),
      'no-work-without-deadline-timer',
    );
    expect(error).toBeInstanceOf(DeterminismViolationError);
    expect(error!.message).toMatch(/Timer machine does not handle this event/);
  });

  it('detects a search attribute upsert the old version did not make', async () => {
    const json = load('always-empty');
    const firstUpsert = json.events.find((e) => e.eventType === 'EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES')!;
    const error = await replayError(
      dropEvents(json, (e) => e === firstUpsert),
      'always-empty-without-upsert',
    );
    expect(error).toBeInstanceOf(DeterminismViolationError);
    expect(error!.message).toMatch(/UpsertWorkflowSearchAttributesMachine does not handle/);
  });
});
