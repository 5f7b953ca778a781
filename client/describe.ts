/** Trace events and pending actions as one reads them at a terminal. Pure: no SDK is loaded. */
import type { PendingActionView } from '../core/run-view';
import type { TraceEvent } from '../core/trace';

const short = (digest: unknown) => (typeof digest === 'string' ? digest.slice(0, 12) : String(digest));

/** One line per trace event, for people. */
export function describeEvent(e: TraceEvent): string {
  const d = (e.data ?? {}) as Record<string, any>;
  const head = `#${e.seq} ${e.type}${e.call_id ? ` [${e.call_id}]` : ''}`;
  switch (e.type) {
    case 'plan_recorded':
      return `${head} ${d.text}`;
    case 'model_replied':
      return `${head} turn ${d.turn}: ${String(d.text).length} characters${d.text_ref ? ' (cut; whole in the host store)' : ''}`;
    case 'tool_proposed': {
      const call = d.call as { name?: unknown; arguments?: Record<string, unknown> } | null;
      const args = call?.arguments ?? {};
      const brief = Object.fromEntries(
        Object.entries(args).map(([k, v]) => [k, typeof v === 'string' && v.length > 60 ? `${v.slice(0, 57)}...` : v]),
      );
      return `${head} ${String(call?.name)} ${JSON.stringify(brief)}`;
    }
    case 'tool_observed': {
      if (d.ok) {
        const detail = okDetail(d.data as Record<string, any> | null);
        return `${head} ok ${detail}${d.truncated ? ' (truncated)' : ''}`;
      }
      const data = d.data as Record<string, any> | null;
      const why = data?.reason ?? (isTestRun(data) ? `${data!.failed} of ${data!.discovered} failed (${data!.status})` : '');
      return `${head} ${d.error}${why ? `: ${why}` : ''}`;
    }
    case 'unreceipted_change':
      return `${head} ${d.step} changed ${d.count} path${d.count === 1 ? '' : 's'}, undone: ${(d.paths ?? []).join(', ')}${d.count > (d.paths?.length ?? 0) ? ', ...' : ''}`;
    case 'approval_requested':
      return `${head} approval needed for ${d.path} (action ${short(e.action_id)})`;
    case 'approval_recorded':
      return `${head} ${d.decision} by ${d.principal ?? 'anonymous'}${d.reason ? `: ${d.reason}` : ''}`;
    case 'approval_ignored':
      return `${head} ${d.reason}`;
    case 'action_written':
      return `${head} ${d.path} ${short(d.before)} -> ${short(d.after)}${d.recovered ? ' (recovered)' : ''}`;
    case 'verification_passed':
    case 'verification_failed':
      return `${head} tests ${d.candidate_tests?.passed}/${d.candidate_tests?.discovered} passed, ${d.acceptance ? `acceptance ${d.acceptance.passed}/${d.acceptance.total}` : 'no acceptance'}${d.acceptance?.failed?.length ? ` (failed: ${d.acceptance.failed.join(', ')})` : ''}${d.protected_changed?.length ? `, protected changed: ${d.protected_changed.join(', ')}` : ''}`;
    case 'repository_loaded':
      return `${head} ${d.name} at ${short(d.base_commit)}: tests ${d.tests_source}; settings ${d.settings_digest ? short(d.settings_digest) : 'none'}; AGENTS.md ${d.instructions ? `${d.instructions.bytes} bytes${d.instructions.cut ? ', cut to the cap' : ''}` : 'none'}${d.submodules?.length ? `; submodules left out: ${d.submodules.join(', ')}` : ''}${d.image ? `; image ${d.image}` : ''}`;
    case 'model_usage':
      return `${head} ${d.input_tokens} in (${d.cached_tokens} from the prompt cache${d.cache_write_tokens ? `, ${d.cache_write_tokens} written to it` : ''}), ${d.output_tokens} out${d.cost_usd === null ? '' : `, $${Number(d.cost_usd).toFixed(6)}`}${d.from_store ? ' (stored response)' : ''}`;
    case 'run_finished': {
      const unread = d.unread
        ? `; not read before the end: ${[...d.unread.messages, ...(d.unread.interrupt ? [`interrupt: ${d.unread.interrupt}`] : [])].map((m: string) => JSON.stringify(m)).join(', ')}`
        : '';
      return `${head} ${d.status}${d.reason ? ` (${d.reason})` : ''}${d.detail ? `: ${d.detail}` : ''}${unread}`;
    }
    default:
      return Object.keys(d).length ? `${head} ${JSON.stringify(d)}` : head;
  }
}

/** A run_tests result's data (an orchestration result has a `status` too: a task's). */
const isTestRun = (data: Record<string, any> | null) => typeof data?.discovered === 'number';

/** What a successful call's data says, in a few words. */
function okDetail(data: Record<string, any> | null): string {
  if (data?.tasks) return (data.tasks as Record<string, any>[]).map(taskDetail).join('; ');
  if (data?.task_id !== undefined) return taskDetail(data);
  if (isTestRun(data)) return `${data!.status}: ${data!.passed}/${data!.discovered} passed`;
  if (data?.paths) return `changed ${data.paths.join(', ')}`;
  if (data?.after) return `${data.path} -> ${short(data.after)}`;
  if (data?.matches) return `${data.matches.length} matches`;
  if (data?.total_lines !== undefined) return `lines ${data.start}-${data.end} of ${data.total_lines}`;
  return '';
}

/** An orchestration tool's answer about one task: dispatched, messaged, stopped, its status, merged. */
function taskDetail(t: Record<string, any>): string {
  const title = typeof t.title === 'string' ? ` "${t.title}"` : '';
  const state = t.delivered
    ? `: ${t.delivered}`
    : t.status
      ? `: ${t.status}${t.reason ? ` (${t.reason})` : ''}${t.already_dispatched ? ', dispatched before' : ''}`
      : '';
  const merged = t.already_merged ? ': merged before' : Array.isArray(t.paths) ? `: merged ${t.paths.join(', ') || 'nothing'}` : '';
  return `task ${t.task_id}${title}${state}${merged}`;
}

export function describePending(p: PendingActionView): string {
  return [
    `apply_patch ${p.path}  (call ${p.call_id})`,
    `  action_id        ${p.action_id}`,
    `  before -> after  ${p.before} -> ${p.after}`,
    `  args_digest      ${p.args_digest}`,
    `  workspace_digest ${p.workspace_digest}`,
    '',
    p.diff + (p.diff_truncated ? '\n... (diff truncated)' : ''),
  ].join('\n');
}
