/** `status` and `trace`: a run's state, counters, pending approval, serving workers, and its trace. */
import { buildRecord } from '../../core/run-view';
import { rosterLine } from '../../core/tasks';
import { command } from '../command';
import { describeEvent, describePending } from '../describe';
import { handleFor, out, queueWorkers, readRunWithTrace } from './shared';

export const status = command({
  name: 'status',
  usage: ['status <workflow-id> [--json]'],
  summary:
    "status, reason, pending approval (action, path, diff), counters, the builds that ran the run, a live run's prompt version and cache,\nand the workers serving the queue with their builds",
  options: { json: { kind: 'flag' } },
  async run(session, positionals, values) {
    const handle = await handleFor(session, positionals);
    const { view } = await readRunWithTrace(session, handle);
    const workers = await queueWorkers(session);
    if (values.json) {
      out({ ...view, workers });
      return 0;
    }
    const c = view.counters;
    out(`${handle.workflowId}: ${view.status}${view.reason ? ` (${view.reason})` : ''}${view.detail ? `: ${view.detail}` : ''}`);
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
    return 0;
  },
});

export const trace = command({
  name: 'trace',
  usage: ['trace <workflow-id> [--full] [--json]'],
  summary:
    'the trace events of a run (from the host store of this machine);\n--full resolves references: whole tool results, calls and plans',
  options: { full: { kind: 'flag' }, json: { kind: 'flag' } },
  async run(session, positionals, values) {
    const handle = await handleFor(session, positionals);
    const { trace: events } = await readRunWithTrace(session, handle, values.full);
    if (values.json) out(events);
    else for (const e of events) out(describeEvent(e));
    return 0;
  },
});
