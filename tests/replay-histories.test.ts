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
import { ARRIVALS_PATCH, SEGMENT_START_PATCH } from '../workflows/changes';
import { resultWithArrival } from '../scripts/support/histories';

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

const bundles = {} as Record<BundleKind, ReplayWorkerOptions>;
beforeAll(async () => {
  // The negative tests make Core warn about the nondeterminism they provoke; keep the output to errors.
  installRuntime('ERROR');
  // The workflow spans' sink as a worker registers it (it drops them while replaying).
  for (const kind of ['traced', 'plain'] as const)
    bundles[kind] = { workflowBundle: await workflowBundle(kind), sinks: workerTelemetry(null).sinks };
});

/** Replays one history on one bundle (the traced one unless said) and returns its error (undefined when it replayed cleanly). */
async function replayError(json: HistoryJson, workflowId: string, kind: BundleKind = 'traced') {
  const results = [];
  for await (const result of Worker.runReplayHistories(bundles[kind], [{ workflowId, history: historyFromJSON(json) }]))
    results.push(result);
  expect(results).toHaveLength(1);
  return results[0].error;
}

/**
 * The events given, numbered anew from 1, with every `...EventId` reference moved with the event
 * it names (an event added without an id is numbered in its place; its references name old ids).
 */
function renumbered(events: HistoryEvent[]): HistoryJson {
  const newId = new Map(events.flatMap((e, i) => (e.eventId === undefined ? [] : [[String(e.eventId), String(i + 1)]])));
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
  return { events: events.map((e, i) => ({ ...(renumber(e) as HistoryEvent), eventId: String(i + 1) })) };
}

/** Removes events as if the old workflow version never issued their commands. */
const dropEvents = (json: HistoryJson, drop: (e: HistoryEvent) => boolean): HistoryJson => renumbered(json.events.filter((e) => !drop(e)));

const base64Json = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64');
const JSON_PLAIN = Buffer.from('json/plain').toString('base64');

/**
 * The history as a build with `patch` would have recorded it: the patch's marker, and the SDK's
 * upsert of the patches so far, right after the segment's first patch (workflows/changes.ts).
 */
function withPatchAtStart(json: HistoryJson, patch: string): HistoryJson {
  const at = json.events.findIndex((e) => e.eventType === 'EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES');
  const first = json.events[at - 1];
  expect(patchId(first)).toBe(SEGMENT_START_PATCH);
  const task = first.markerRecordedEventAttributes.workflowTaskCompletedEventId as string;
  const marker = {
    eventType: 'EVENT_TYPE_MARKER_RECORDED',
    markerRecordedEventAttributes: {
      markerName: 'core_patch',
      details: { 'patch-data': { payloads: [{ metadata: { encoding: JSON_PLAIN }, data: base64Json({ id: patch, deprecated: false }) }] } },
      workflowTaskCompletedEventId: task,
    },
  };
  const upsert = {
    eventType: 'EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES',
    upsertWorkflowSearchAttributesEventAttributes: {
      workflowTaskCompletedEventId: task,
      searchAttributes: {
        indexedFields: {
          TemporalChangeVersion: {
            metadata: { type: Buffer.from('KeywordList').toString('base64'), encoding: JSON_PLAIN },
            data: base64Json([patch, SEGMENT_START_PATCH].sort()),
          },
        },
      },
    },
  };
  return renumbered([...json.events.slice(0, at + 1), marker, upsert, ...json.events.slice(at + 1)]);
}

const marker = (e: HistoryEvent) => e.markerRecordedEventAttributes?.markerName as string | undefined;
const patchId = (e: HistoryEvent) =>
  marker(e) === 'core_patch'
    ? (
        JSON.parse(Buffer.from(e.markerRecordedEventAttributes.details['patch-data'].payloads[0].data, 'base64').toString('utf8')) as {
          id: string;
        }
      ).id
    : null;

describe('committed histories', () => {
  it('include the canonical run and the failure runs', () => {
    expect(names).toEqual(
      expect.arrayContaining(['canonical', 'always-empty', 'no-work', 'untrusted-replay', 'model-error-transient-then-permanent']),
    );
  });

  it("include a run whose reply-event marker an answered Query moved into the workflow task after its local activity's", () => {
    const { events } = load('found/reply-event-after-query');
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

describe("a task's outcome in the workflow task of the run's own result", () => {
  /**
   * Found by the history check on an orchestrating run (the run tree over max_cost_usd, in
   * tests/untrusted-repository/settings.test.ts), cut after the workflow task it is about: the
   * run's decision came back over its budget, and a task's outcome came in the same workflow task.
   * The run went on at once, as a task had ended; the traced bundle, where more promise steps lie
   * between an activity's result and the code after it, took the outcome first and waited for
   * another task to end (workflows/local-chain.ts).
   */
  const NAME = 'before-arrivals/task-outcome-with-decision';
  /** The workflow id it ran under: its tasks' ids are made of it. */
  const WORKFLOW_ID = 'run-22707-10-run';
  it('is a decision over its budget and a task outcome brought by one workflow task, which scheduled the next decision', () => {
    const { events } = load(NAME);
    const json = (e: HistoryEvent) =>
      JSON.parse(Buffer.from(e.activityTaskCompletedEventAttributes.result.payloads[0].data, 'base64').toString('utf8'));
    expect(events.slice(-8).map((e) => e.eventType.replace('EVENT_TYPE_', ''))).toEqual([
      'WORKFLOW_TASK_COMPLETED',
      'ACTIVITY_TASK_STARTED',
      'ACTIVITY_TASK_COMPLETED',
      'CHILD_WORKFLOW_EXECUTION_COMPLETED',
      'WORKFLOW_TASK_SCHEDULED',
      'WORKFLOW_TASK_STARTED',
      'WORKFLOW_TASK_COMPLETED',
      'ACTIVITY_TASK_SCHEDULED',
    ]);
    expect(json(events.at(-6)!)).toMatchObject({ kind: 'over_budget' });
    expect(events.at(-1)!.activityTaskScheduledEventAttributes.activityType.name).toBe('decide');
    expect(events.filter((e) => patchId(e) !== null).map(patchId)).toEqual([SEGMENT_START_PATCH]);
    // The history check counts such histories among those the suites make; none of the recorded runs has one.
    expect(resultWithArrival(historyFromJSON(load(NAME)))).toBe(true);
    expect(recorded.filter((name) => resultWithArrival(historyFromJSON(load(name))))).toEqual([]);
  });

  it('as its build recorded it (before ARRIVALS_PATCH): replays on the bundle it ran on, and not on the other', async () => {
    expect(await replayError(load(NAME), WORKFLOW_ID, 'plain')).toBeUndefined();
    const error = await replayError(load(NAME), WORKFLOW_ID, 'traced');
    expect(error).toBeInstanceOf(DeterminismViolationError);
    expect(error!.message).toContain(`No command scheduled for event HistoryEvent(id: ${load(NAME).events.length}, ActivityTaskScheduled)`);
  });

  it.each(['traced', 'plain'] as const)('as this build records it (with ARRIVALS_PATCH): replays on the %s bundle', async (kind) => {
    const json = withPatchAtStart(load(NAME), ARRIVALS_PATCH);
    expect(json.events.filter((e) => patchId(e) !== null).map(patchId)).toEqual([SEGMENT_START_PATCH, ARRIVALS_PATCH]);
    expect(await replayError(json, WORKFLOW_ID, kind)).toBeUndefined();
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
