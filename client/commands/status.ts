/** `status` and `trace`: a run's state, counters, pending approval, serving workers, and its trace. */
import { buildRecord, type RunView } from '../../core/run-view';
import { rosterLine } from '../../core/tasks';
import { command } from '../command';
import { describeEvent, describePending } from '../describe';
import type { Session } from '../session';
import type { RunHandle } from '../run-access';
import { consoleLink, handleFor, out, principal, queueWorkers, readRunWithTrace, storedTraceOf } from './shared';

export const status = command({
  name: 'status',
  usage: ['status <workflow-id> [--follow] [--json]'],
  summary:
    "status, reason, pending approval (action, path, diff), counters, the builds that ran the run, a live run's prompt version and cache,\nand the workers serving the queue with their builds. --follow then prints each new event until the run ends (through the\nevent stream of the console that serves this state folder, else by reading the run); with --json the events go to stderr and\nthe status printed is the final one. Exit status with --follow: 0 for completed, 1 for any other end",
  options: { follow: { kind: 'flag' }, json: { kind: 'flag' } },
  async run(session, positionals, values) {
    const handle = await handleFor(session, positionals);
    const { view, trace } = await readRunWithTrace(session, handle);
    const workers = await queueWorkers(session);
    if (values.follow) {
      if (!values.json) printStatus(handle.workflowId, view, workers);
      const end = await followToEnd(session, handle, trace.at(-1)?.seq ?? 0, values.json);
      if (values.json) out({ ...end, workers });
      return end.status === 'completed' ? 0 : 1;
    }
    if (values.json) {
      out({ ...view, workers });
      return 0;
    }
    printStatus(handle.workflowId, view, workers);
    return 0;
  },
});

/** Follows a run from event `after` to its end (events on stdout, or stderr with --json); its final state. */
async function followToEnd(session: Session, handle: RunHandle, after: number, json: boolean): Promise<RunView> {
  const log = (line: string) => (json ? process.stderr : process.stdout).write(`${line}\n`);
  const { followRun } = await import('../follow');
  const { runOutcome } = await import('../run-access');
  const record = await followRun(handle, {
    interactive: false,
    principal: principal(),
    log,
    stored: storedTraceOf(session),
    console: await consoleLink(session),
    after,
  });
  log(`\n${record.status}${record.reason ? ` (${record.reason})` : ''}`);
  return (await runOutcome(handle)).state;
}

function printStatus(workflowId: string, view: RunView, workers: { identity: string; background: boolean }[]): void {
  const c = view.counters;
  out(`${workflowId}: ${view.status}${view.reason ? ` (${view.reason})` : ''}${view.detail ? `: ${view.detail}` : ''}`);
  out(`fixture ${view.fixture ?? '?'}, replay ${view.replay ?? '?'}, backend ${view.backend}, approver ${view.approver}`);
  out(
    `turns ${c.turns}, tool calls ${c.tool_calls} (${c.repeated_calls ?? 0} repeated), writes ${c.writes}, receipts ${c.receipts}, model retries ${c.model_retries}, empty replies ${c.empty_replies ?? 0}`,
  );
  // State from before builds were recorded has none.
  const builds = view.builds ?? [];
  out(builds.length ? `ran on build ${builds.join(', then ')}` : 'ran on build (not recorded)');
  if (view.prompt) out(`prompt ${view.prompt.version} (${view.prompt.digest.slice(0, 12)})`);
  if (view.usage) {
    const u = view.usage;
    const cache = view.prompt_cache;
    out(
      `model calls ${u.model_calls}: ${u.input_tokens} tokens in (${u.cached_tokens} from the prompt cache${cache ? ` in ${cache.hits} calls, ${cache.write_tokens} written to it` : ''}), ${u.output_tokens} out, cost ${u.cost_usd === null ? 'not priced' : `$${u.cost_usd.toFixed(4)}`}`,
    );
  }
  if (view.parent) out(`task "${view.parent.title}" of run ${view.parent.workflow_id}`);
  out(view.trace_id ? `trace ${view.trace_id}` : 'trace: not exported (the worker has no OTEL_EXPORTER_OTLP_ENDPOINT)');
  if (view.pending_approval) out(`\npending approval:\n${describePending(view.pending_approval)}`);
  if (view.subruns) {
    const c = view.subruns.counts;
    out(
      `\ntasks: ${c.dispatched} dispatched, ${c.messages} messages (${c.messages_to_ended} to ended tasks), ${c.stops} stops, ${c.merges} merges, ${c.unknown_task} unknown ids`,
    );
    for (const t of view.subruns.tasks) out(rosterLine(t));
  }
  if (view.verification) out(`\nrecord: ${JSON.stringify(buildRecord(view))}`);
  for (const w of workers) out(`served by worker ${w.identity}${w.background ? ' (the background worker of this state folder)' : ''}`);
}

export const trace = command({
  name: 'trace',
  usage: ['trace <workflow-id> [--full] [--json]'],
  summary:
    'the trace events of a run (from the host store of this machine);\n--full resolves references: whole tool results, calls and plans, and every test with its outcome',
  options: { full: { kind: 'flag' }, json: { kind: 'flag' } },
  async run(session, positionals, values) {
    const handle = await handleFor(session, positionals);
    const { trace: events } = await readRunWithTrace(session, handle, values.full);
    if (values.json) out(events);
    else for (const e of events) out(describeEvent(e));
    return 0;
  },
});
