/**
 * Following a run from the terminal: each trace event printed as it happens, and, for an
 * interactive approver, each pending write shown with its path, diff and digests and a y/N prompt.
 */
import { createInterface } from 'node:readline';
import type { RunRecord } from '../core/contracts';
import type { PendingApproval } from '../core/run-view';
import type { TraceEvent } from '../core/trace';
import { approvalFor, isRunning, ORIGIN, queryState, runOutcome, sendApproval, traceSince, type RunHandle } from './run-access';

const short = (digest: unknown) => (typeof digest === 'string' ? digest.slice(0, 12) : String(digest));

/** One line per trace event, for people. */
export function describeEvent(e: TraceEvent): string {
  const d = (e.data ?? {}) as Record<string, any>;
  const head = `#${e.seq} ${e.type}${e.call_id ? ` [${e.call_id}]` : ''}`;
  switch (e.type) {
    case 'plan_recorded':
      return `${head} ${d.text}`;
    case 'tool_proposed': {
      const call = d.call as { name?: unknown; arguments?: Record<string, unknown> } | null;
      const args = call?.arguments ?? {};
      const brief = Object.fromEntries(Object.entries(args).map(([k, v]) => [k, typeof v === 'string' && v.length > 60 ? `${v.slice(0, 57)}...` : v]));
      return `${head} ${String(call?.name)} ${JSON.stringify(brief)}`;
    }
    case 'tool_observed': {
      if (d.ok) {
        const data = d.data as Record<string, any>;
        const detail = data?.status ? `${data.status}: ${data.passed}/${data.discovered} passed` : data?.paths ? `changed ${data.paths.join(', ')}` : data?.after ? `${data.path} -> ${short(data.after)}` : data?.matches ? `${data.matches.length} matches` : data?.total_lines !== undefined ? `lines ${data.start}-${data.end} of ${data.total_lines}` : '';
        return `${head} ok ${detail}${d.truncated ? ' (truncated)' : ''}`;
      }
      const data = d.data as Record<string, any> | null;
      const why = data?.reason ?? (data?.status ? `${data.failed} of ${data.discovered} failed (${data.status})` : '');
      return `${head} ${d.error}${why ? `: ${why}` : ''}`;
    }
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
      return `${head} tests ${d.candidate_tests?.passed}/${d.candidate_tests?.discovered} passed, acceptance ${d.acceptance?.passed}/${d.acceptance?.total}${d.acceptance?.failed?.length ? ` (failed: ${d.acceptance.failed.join(', ')})` : ''}${d.protected_changed?.length ? `, protected changed: ${d.protected_changed.join(', ')}` : ''}`;
    case 'run_finished':
      return `${head} ${d.status}${d.reason ? ` (${d.reason})` : ''}${d.detail ? `: ${d.detail}` : ''}`;
    default:
      return Object.keys(d).length ? `${head} ${JSON.stringify(d)}` : head;
  }
}

export function describePending(p: PendingApproval): string {
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

/** Asks one question at the terminal; null when standard input has ended. */
function ask(question: string): Promise<string | null> {
  return new Promise((resolve) => {
    const rl = createInterface({ input: process.stdin, output: process.stderr });
    let answered = false;
    rl.question(question, (answer) => {
      answered = true;
      rl.close();
      resolve(answer);
    });
    rl.on('close', () => {
      if (!answered) resolve(null);
    });
  });
}

export class StdinClosed extends Error {}

/**
 * Follows a run to its end. Events go to `log` (stderr with --json). Returns the run's record.
 * With `interactive`, pending approvals are asked at the terminal and signalled. The trace is read
 * page by page after the last event printed; events the run no longer holds in memory come from
 * the host store (`stored`).
 */
export async function followRun(
  handle: RunHandle,
  opts: {
    interactive: boolean;
    principal: string;
    log: (line: string) => void;
    pollMs?: number;
    /** The run's stored trace (host store), for the events the run no longer holds. */
    stored?: (runId: string) => TraceEvent[];
  },
): Promise<RunRecord> {
  let printed = 0; // the highest seq printed
  let asked: string | null = null;
  let runId: string | null = null;
  const print = (events: TraceEvent[]) => {
    for (const e of events) {
      if (e.seq <= printed) continue;
      opts.log(describeEvent(e));
      printed = e.seq;
    }
  };
  const flush = async () => {
    const page = await traceSince(handle, printed);
    if (page.oldest !== null && page.oldest > printed + 1 && opts.stored) {
      runId ??= (await queryState(handle)).run_id;
      print(opts.stored(runId));
    }
    print(page.events);
  };
  while (await isRunning(handle)) {
    await flush();
    if (opts.interactive) {
      const view = await queryState(handle);
      const pending = view.pending_approval;
      if (view.status === 'awaiting_approval' && pending && asked !== pending.action_id) {
        asked = pending.action_id;
        opts.log(describePending(pending));
        const answer = await ask(`Approve this write? [y/N] `);
        if (answer === null) throw new StdinClosed(`standard input closed while action ${pending.action_id} awaits approval`);
        const yes = /^y(es)?$/i.test(answer.trim());
        const approval = approvalFor(pending, yes ? 'approve' : 'reject', opts.principal, yes ? undefined : 'rejected at the terminal', `${ORIGIN}:approval:${pending.action_id}`);
        await sendApproval(handle, approval);
      }
    }
    await new Promise((r) => setTimeout(r, opts.pollMs ?? 300));
  }
  const outcome = await runOutcome(handle);
  print(opts.stored?.(outcome.trace.run_id) ?? []);
  return outcome.record;
}
