/**
 * Every workflow history the tests make, replayed. Before a suite stops a Temporal server (a dev
 * server, a cluster, the embedded default of a state folder), the history of each workflow
 * execution on it, completed or not, is appended to the sink of the suite's file, with the test
 * that started it. One replay worker per workflow bundle replays them, streamed from the sinks:
 * in the tests, a process per bundle (scripts/replay-histories.ts, started by jest's global
 * set-up at the lowest CPU priority) follows the sinks while the suites run, and jest's global
 * tear-down waits for the rest and reports (tests/helpers/history-sink.ts, global-setup.ts,
 * global-teardown.ts).
 *
 * Only histories this build's code made are replayed: another build's (a suite's deliberately
 * different build B) and workflow types the bundles do not hold (a suite's own) are counted and
 * left out. Outside the tests no sink is set and stopping a server fetches nothing.
 */
import { appendFileSync, closeSync, createReadStream, openSync, readdirSync, readSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { StringDecoder } from 'node:string_decoder';
import { Client, type Connection } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { Worker, type ReplayWorkerOptions } from '@temporalio/worker';
import { connectClient } from '../../host/connection';
import { AGENT_EVAL, AGENT_RUN } from '../../workflows/messages';

/** One line of a sink: a workflow execution's whole history and where it came from. */
export interface SinkLine {
  test: string;
  server: string;
  workflow_id: string;
  run_id: string;
  type: string;
  status: string;
  /** The history as the server's protobuf, base64 (an eighth of its JSON, and no JSON to convert). */
  history?: string;
  /** Set instead of `history` when the server could not be read before it stopped. */
  error?: string;
  /** The last line of a server's collection: how long it took the suite (ms), no history. */
  collect_ms?: number;
}

/** Histories fetched at a time from one server. */
const FETCH_AT_ONCE = 4;

export class HistorySink {
  /**
   * `file`: where this suite's histories go; `attribute`: the test running when a workflow
   * started (its start time in ms since the epoch), as `file › test name`.
   */
  constructor(
    readonly file: string,
    private readonly attribute: (startedAtMs: number | null) => string,
  ) {}

  /** Appends the history of every workflow execution of the server at `address`; how many. */
  async collect(address: string): Promise<number> {
    const began = Date.now();
    let connection: Connection | null = null;
    try {
      connection = await connectClient({ address, connectTimeout: 5_000 });
      const client = new Client({ connection });
      const executions = [];
      for await (const e of client.workflow.list()) executions.push(e);
      for (let at = 0; at < executions.length; at += FETCH_AT_ONCE) {
        const batch = executions.slice(at, at + FETCH_AT_ONCE);
        const histories = await Promise.all(batch.map((e) => client.workflow.getHandle(e.workflowId, e.runId).fetchHistory()));
        const lines = batch.map((e, i) => {
          const line: SinkLine = {
            test: this.attribute(e.startTime?.getTime() ?? null),
            server: address,
            workflow_id: e.workflowId,
            run_id: e.runId,
            type: e.type,
            status: e.status.name,
            history: encodeHistory(histories[i]),
          };
          return `${JSON.stringify(line)}\n`;
        });
        appendFileSync(this.file, lines.join(''));
      }
      this.serverLine(address, { collect_ms: Date.now() - began });
      return executions.length;
    } catch (err) {
      this.serverLine(address, { error: (err as Error).message });
      return 0;
    } finally {
      await connection?.close().catch(() => undefined);
    }
  }

  /** A line about the server at `address` itself (no workflow): its collection's time, or why it could not be read. */
  private serverLine(address: string, about: Pick<SinkLine, 'collect_ms' | 'error'>): void {
    const line: SinkLine = { test: this.attribute(null), server: address, workflow_id: '', run_id: '', type: '', status: '', ...about };
    appendFileSync(this.file, `${JSON.stringify(line)}\n`);
  }
}

let active: HistorySink | null = null;

/** The sink of the running test file (null: none, as outside the tests). */
export function useHistorySink(sink: HistorySink | null): void {
  active = sink;
}

/** Call right before a server stops for good: its histories go to the active sink, if any. */
export async function collectHistories(address: string): Promise<void> {
  await active?.collect(address);
}

export interface ReplayFailure {
  test: string;
  workflow_id: string;
  run_id: string;
  bundle: string;
  error: string;
}

export interface ReplayReport {
  /** Workflow executions fetched. */
  histories: number;
  /** Replayed on every bundle. */
  replayed: number;
  /** Left out, by why. */
  skipped: Record<string, number>;
  /** Servers that could not be read before they stopped, with the test that stopped them. */
  unreachable: string[];
  failures: ReplayFailure[];
  /** Of those replayed, the histories where one workflow task brought an activity's result with a task's outcome or a timer's firing. */
  together: number;
  /** Seconds spent replaying (not waiting for lines). */
  seconds: number;
  /** Seconds the suites spent fetching the histories, before their servers stopped. */
  collect_seconds: number;
}

const REPLAYED_TYPES = new Set([AGENT_RUN, AGENT_EVAL]);

type History = temporal.api.history.v1.IHistory;

export const encodeHistory = (history: History): string =>
  Buffer.from(temporal.api.history.v1.History.encode(history).finish()).toString('base64');
export const decodeHistory = (line: SinkLine): temporal.api.history.v1.History =>
  temporal.api.history.v1.History.decode(Buffer.from(line.history!, 'base64'));

/**
 * The builds that completed the history's workflow tasks: a worker's deployment version, else the
 * build its identity names (`<pid>@<host> build <id>`, as this project's workers name themselves).
 */
export function buildsOf(history: History): Set<string> {
  const builds = new Set<string>();
  for (const e of history.events ?? []) {
    const done = e.workflowTaskCompletedEventAttributes;
    const build = done?.deploymentVersion?.buildId || done?.workerVersion?.buildId || /\bbuild (\S+)/.exec(done?.identity ?? '')?.[1];
    if (build) builds.add(build);
  }
  return builds;
}

const EventType = temporal.api.enums.v1.EventType;
const RESULTS = new Set([
  EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
  EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED,
  EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT,
  EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED,
]);
const ARRIVALS = new Set([
  EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED,
  EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_FAILED,
  EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_CANCELED,
  EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_TERMINATED,
  EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_TIMED_OUT,
  EventType.EVENT_TYPE_TIMER_FIRED,
]);

/**
 * Whether one workflow task brought an activity's result together with a child's outcome or a
 * timer's firing: the coincidence whose order the two bundles would see differently but for
 * workflows/local-chain.ts's `arrive`.
 */
export function resultWithArrival(history: History): boolean {
  let result = false;
  let arrival = false;
  for (const e of history.events ?? []) {
    const type = e.eventType ?? EventType.EVENT_TYPE_UNSPECIFIED;
    if (type === EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED) {
      if (result && arrival) return true;
      result = arrival = false;
    } else if (RESULTS.has(type)) result = true;
    else if (ARRIVALS.has(type)) arrival = true;
  }
  return false;
}

/** Why a history is not replayed, or null when it is. */
function leftOut(line: SinkLine, history: History, build: string): string | null {
  if (!REPLAYED_TYPES.has(line.type)) return 'workflow types the bundles do not hold';
  if ([...buildsOf(history)].some((b) => b !== build)) return 'histories of another build';
  return null;
}

const sinkFiles = (dir: string) =>
  readdirSync(dir)
    .filter((f) => f.endsWith('.ndjson'))
    .sort()
    .map((f) => join(dir, f));

/** The lines of the sinks in `dir` as they are now. */
async function* sinkLines(dir: string): AsyncGenerator<SinkLine> {
  for (const file of sinkFiles(dir)) {
    for await (const line of createInterface({ input: createReadStream(file), crlfDelay: Infinity }))
      if (line !== '') yield JSON.parse(line) as SinkLine;
  }
}

/**
 * The lines of the sinks in `dir` as suites append them (whole lines only), until `finished()`
 * says no more will come and nothing is left to read.
 */
export async function* followSinks(dir: string, finished: () => boolean, pollMs = 500): AsyncGenerator<SinkLine> {
  const read = new Map<string, { at: number; rest: string; decoder: StringDecoder }>();
  const chunk = Buffer.alloc(1 << 20);
  for (;;) {
    const last = finished();
    let got = false;
    for (const file of sinkFiles(dir)) {
      const state = read.get(file) ?? { at: 0, rest: '', decoder: new StringDecoder('utf8') };
      read.set(file, state);
      const fd = openSync(file, 'r');
      try {
        for (let n = readSync(fd, chunk, 0, chunk.length, state.at); n > 0; n = readSync(fd, chunk, 0, chunk.length, state.at)) {
          state.at += n;
          const lines = (state.rest + state.decoder.write(chunk.subarray(0, n))).split('\n');
          state.rest = lines.pop()!;
          for (const line of lines) {
            got = true;
            if (line !== '') yield JSON.parse(line) as SinkLine;
          }
        }
      } finally {
        closeSync(fd);
      }
    }
    if (last && !got) return;
    if (!got) await new Promise((r) => setTimeout(r, pollMs));
  }
}

/** Replays `lines` on one bundle with one replay worker, as they come; the report's counts and failures. */
export async function replayLines(
  lines: AsyncIterable<SinkLine>,
  bundle: string,
  options: ReplayWorkerOptions,
  build: string,
): Promise<ReplayReport> {
  const report: ReplayReport = {
    histories: 0,
    replayed: 0,
    skipped: {},
    unreachable: [],
    failures: [],
    together: 0,
    seconds: 0,
    collect_seconds: 0,
  };
  // Results come back one per history, in order. The workflow id is the run's own: the workflow
  // code reads it (a task's id derives from its parent's).
  const origins: Pick<SinkLine, 'test' | 'workflow_id' | 'run_id'>[] = [];
  let next = 0;
  let since = 0;
  const histories = async function* () {
    for await (const line of lines) {
      since = Date.now();
      if (line.error !== undefined) {
        report.unreachable.push(`${line.server} (${line.test}): ${line.error}`);
        continue;
      }
      if (line.collect_ms !== undefined) {
        report.collect_seconds += line.collect_ms / 1000;
        continue;
      }
      report.histories++;
      const history = decodeHistory(line);
      const why = leftOut(line, history, build);
      if (why !== null) {
        report.skipped[why] = (report.skipped[why] ?? 0) + 1;
        continue;
      }
      origins.push({ test: line.test, workflow_id: line.workflow_id, run_id: line.run_id });
      if (resultWithArrival(history)) report.together++;
      yield { workflowId: line.workflow_id, history };
    }
  };
  for await (const { error } of Worker.runReplayHistories(options, histories())) {
    report.seconds += (Date.now() - since) / 1000;
    const origin = origins[next++];
    if (error !== undefined) report.failures.push({ ...origin, bundle, error: error.message });
  }
  report.replayed = origins.length;
  return report;
}

/** Replays every history of the sinks in `dir` as they are now on each of `bundles`, one after the other. */
export async function replaySinks(dir: string, bundles: Record<string, ReplayWorkerOptions>, build: string): Promise<ReplayReport> {
  const reports = [];
  for (const [bundle, options] of Object.entries(bundles)) reports.push(await replayLines(sinkLines(dir), bundle, options, build));
  return mergeReports(reports);
}

/** One report of the same histories replayed on several bundles. */
export function mergeReports(reports: ReplayReport[]): ReplayReport {
  const [first] = reports;
  return {
    ...first,
    failures: reports.flatMap((r) => r.failures),
    seconds: reports.reduce((s, r) => s + r.seconds, 0),
  };
}
