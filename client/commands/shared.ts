/** What several commands share: output, the principal, a run's handle, state and trace, the queue's workers. */
import { userInfo } from 'node:os';
import type { RunInput, RunRecord } from '../../core/contracts';
import type { RunView } from '../../core/run-view';
import type { TraceEvent } from '../../core/trace';
import { workerIdentity } from '../../host/build';
import { liveWorker } from '../../host/background-worker';
import { ensureEndpoint } from '../../host/endpoints';
import { endpointSchema } from '../../core/contracts';
import { formatIssues } from '../../core/validate';
import { UsageError } from '../command';
import type { RunHandle } from '../run-access';
import type { Session } from '../session';
import type { ConsoleLink } from '../event-stream';
import { openStore } from '../../store/store';
import { fullEvent, storedTrace } from '../../store/stored-trace';

export const out = (value: unknown) => process.stdout.write(`${typeof value === 'string' ? value : JSON.stringify(value, null, 2)}\n`);

export const principal = () => `user:${userInfo().username}`;

/** Loaded with the first command that talks to Temporal (help and usage errors never load the SDK). */
export const access = () => import('../run-access');

export async function handleFor(session: Session, positionals: string[]): Promise<RunHandle> {
  const id = positionals[0];
  if (!id) throw new UsageError('missing <workflow-id>');
  return (await access()).runHandle(session.client, id);
}

/** The Temporal Web UI's address, when known (the embedded dev server's, or AGENT_WEB_UI_URL). */
export function webUi(session: Session): string | null {
  return session.webUi;
}

/**
 * State and trace of a run: the state from its result once closed (no worker needed), else by
 * query; the trace from the host store (this machine's state folder), merged with the events the
 * running run holds. `full` resolves the references in events to the stored contents.
 */
export async function readRunWithTrace(session: Session, handle: RunHandle, full = false): Promise<{ view: RunView; trace: TraceEvent[] }> {
  const live = await readLive(session, handle, false);
  const store = openStore(session.settings.stateDir);
  if (store === null) return { view: live.view, trace: live.trace };
  try {
    const trace = mergeTrace(storedTrace(store, live.view.run_id), live.trace);
    return { view: live.view, trace: full ? trace.map((e) => fullEvent(store, e)) : trace };
  } finally {
    store.close();
  }
}

/** State of a run alone, as `readRunWithTrace` reads it (no trace asked, no host store opened). */
export async function readRunView(session: Session, handle: RunHandle): Promise<RunView> {
  return (await readLive(session, handle, true)).view;
}

async function readLive(session: Session, handle: RunHandle, viewOnly: boolean) {
  const { readRun, NoWorkerAnswered, WedgedRun } = await access();
  try {
    // Embedded default: the background worker may not run (yet); start it and ask again.
    return await readRun(handle, { viewOnly, noAnswer: session.embedded ? async () => void (await session.ensureWorker()) : undefined });
  } catch (err) {
    // A wedged run is named as such: another worker would fail its task alike.
    if (err instanceof WedgedRun) throw new Error(err.message);
    if (err instanceof NoWorkerAnswered)
      throw new Error(`${err.message} on task queue ${session.settings.taskQueue}; start one with npm run worker`);
    throw err;
  }
}

/** Events by seq: stored ones, then the live ones (which win: they are the same events). */
export function mergeTrace(stored: TraceEvent[], live: TraceEvent[]): TraceEvent[] {
  const bySeq = new Map<number, TraceEvent>();
  for (const e of [...stored, ...live]) bySeq.set(e.seq, e);
  return [...bySeq.values()].sort((a, b) => a.seq - b.seq);
}

/** The stored trace of a run in this machine's host store (null when the store is elsewhere). */
export function storedTraceOf(session: Session): (runId: string) => TraceEvent[] | null {
  return (runId) => {
    const store = openStore(session.settings.stateDir);
    try {
      return store ? storedTrace(store, runId) : null;
    } finally {
      store?.close();
    }
  };
}

/**
 * The console that serves this state folder, with the command line's API token for it, or null
 * (said once on stderr: the run is then read directly, as without `--follow`).
 */
export async function consoleLink(session: Session): Promise<ConsoleLink | null> {
  const { consoleFor } = await import('../console/record');
  const found = consoleFor(session.settings.stateDir);
  if ('none' in found) {
    process.stderr.write(`(${found.none}: following the run directly)\n`);
    return null;
  }
  return found;
}

/**
 * The workers that polled the run queue in the last minute (their identity names their build),
 * and on the embedded default the state folder's background worker.
 */
export async function queueWorkers(session: Session): Promise<{ identity: string; background: boolean }[]> {
  const { pollers } = await session.client.workflowService.describeTaskQueue({
    namespace: session.namespace,
    taskQueue: { name: session.settings.taskQueue, kind: 1 }, // TASK_QUEUE_KIND_NORMAL
    taskQueueType: 1, // TASK_QUEUE_TYPE_WORKFLOW
  });
  const recent = (pollers ?? []).filter((p) => Number(p.lastAccessTime?.seconds ?? 0) * 1000 > Date.now() - 60_000);
  const own = session.embedded ? liveWorker(session.settings.stateDir) : null;
  const workers = recent.map((p) => ({
    identity: p.identity ?? '?',
    background: own !== null && (p.identity ?? '').startsWith(`${own.pid}@`),
  }));
  if (own !== null && !workers.some((w) => w.background)) workers.push({ identity: workerIdentity(own.pid, own.build), background: true });
  return workers.sort((a, b) => Number(b.background) - Number(a.background) || a.identity.localeCompare(b.identity));
}

/** The options of the `--provider` shortcut, as `run` and `eval` declare them. */
export interface ProviderValues {
  provider?: string;
  'base-url'?: string;
  'api-key-env'?: string;
}

/**
 * `--provider KIND [--base-url URL] [--api-key-env VAR]` on the embedded default: the endpoint of
 * the local providers file with exactly these settings, added when there is none. A cluster's
 * endpoints are its operator's: there a run (or a batch) names one with --endpoint.
 */
export function localEndpoint(session: Session, values: ProviderValues): string {
  if (!session.embedded)
    throw new UsageError(
      "--provider writes the embedded default's providers file; against a cluster, name one of its operator's endpoints with --endpoint NAME",
    );
  const kind = values.provider as 'openai' | 'anthropic';
  const wanted = {
    kind,
    base_url: values['base-url'],
    api_key_env: values['api-key-env'] ?? (kind === 'openai' ? 'OPENAI_API_KEY' : 'ANTHROPIC_API_KEY'),
  };
  const parsed = endpointSchema.omit({ name: true, models: true }).safeParse(wanted);
  if (!parsed.success) throw new UsageError(formatIssues(parsed.error));
  const { name, added } = ensureEndpoint(session.settings.providersFile, parsed.data);
  process.stderr.write(
    `endpoint ${name} (${kind}, key from ${wanted.api_key_env}) ${added ? 'added to' : 'found in'} ${session.settings.providersFile}\n`,
  );
  return name;
}

/**
 * Starts a run and prints its workflow id; with `--wait` (or `--follow`, through the console's
 * event stream with the reply's text as it streams) follows it to its end instead (asking at the
 * terminal for each approval when its approver is interactive) and prints its record. `completed`
 * runs `after`, whose status is the command's. The exit status: 0 completed, 1 any other end, 3
 * when the terminal closed while a write waits.
 */
export async function startAndFollow(
  session: Session,
  input: RunInput,
  workflowId: string,
  values: { wait: boolean; json: boolean; follow?: boolean },
  after: (record: RunRecord, log: (line: string) => void) => Promise<number> = async () => 0,
): Promise<number> {
  const { startRun } = await access();
  await session.ensureWorker();
  let said = false;
  const handle = await startRun(session.client, input, {
    taskQueue: session.settings.taskQueue,
    workflowId,
    patience: {
      onAway: (err) => {
        if (!said) process.stderr.write(`(the Temporal server does not answer yet: ${(err as Error).message}; asking again)\n`);
        said = true;
      },
    },
  });
  if (!values.wait && !values.follow) {
    out(values.json ? { workflow_id: handle.workflowId, run_id: handle.firstExecutionRunId } : handle.workflowId);
    return 0;
  }
  const stream = values.json ? process.stderr : process.stdout;
  const log = (line: string) => stream.write(`${line}\n`);
  log(`workflow ${handle.workflowId}`);
  const { followRun, stateFolderDiagnosis, StdinClosed } = await import('../follow');
  try {
    const record = await followRun(handle, {
      interactive: (input.approver ?? 'interactive') === 'interactive',
      principal: principal(),
      log,
      stored: storedTraceOf(session),
      diagnose: () => stateFolderDiagnosis(session.settings.stateDir, session.embedded),
      // As long as a worker waits for space before the run ends disk_full.
      diagnosedPatienceMs: session.settings.diskFullWaitS * 1000,
      ...(values.follow ? { console: await consoleLink(session), text: (piece: string) => stream.write(piece) } : {}),
    });
    if (values.json) out(JSON.stringify(record));
    else
      log(
        `\n${record.status}${record.reason ? ` (${record.reason})` : ''}: ${record.writes} writes, ${record.receipts} receipts, diff ${record.diff_paths.join(', ') || '(none)'}${record.trace_id ? `; trace ${record.trace_id}` : ''}`,
      );
    return record.status === 'completed' ? after(record, log) : 1;
  } catch (err) {
    if (!(err instanceof StdinClosed)) throw err;
    process.stderr.write(`${err.message}\nthe run keeps waiting; approve with: npm run agent -- approve ${handle.workflowId}\n`);
    return 3;
  }
}
