/**
 * A fork's plan: what a new run needs to start from another run's state after one of its turns,
 * found in what this host keeps of that run, or why it no longer can be. Nothing of the forked run
 * is changed: its trace, transcript and ledger rows are read, its run folder is copied from.
 *
 * - The turn's state is the one its trace recorded: the start of the next turn (`model_requested`
 *   of turn N+1, its first request) or the run's end (`run_finished`), each a `TurnState`.
 * - The workspace is the forked run's baseline with each receipted write up to that point put back
 *   in order, each checked against its `before` and `after` digests, their bytes from the store's
 *   `contents`; the result must have the digest the turn's state recorded.
 * - The transcript is the forked run's chain up to the turn's state: its stored head then, and the
 *   entries appended after it by then, found on the chain that ends at the run's final head.
 * - A fork of a fork inherits the writes its parent restored (the plan workspace/fork.ts kept),
 *   and cannot go back before the turn its parent started from.
 *
 * Reads the host's store and ledger, so it runs in the activity; the restore it plans runs in a
 * workspace thread (workspace/fork.ts), which this module imports and never the other way.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { ForkInput } from '../core/contracts';
import type { TraceEvent, TurnState } from '../core/trace';
import type { Ledger } from '../store/ledger';
import { StoreError, type Store } from '../store/store';
import { keptForkPlan, type ForkPlan, type ForkWrite } from './fork';
import { runPaths } from './workspace';

/** A plan, or why this host can no longer make one. */
export type ForkFinding = { ok: true; plan: ForkPlan } | { ok: false; detail: string };

export function planFork(host: { store: Store; ledger: Ledger; stateDir: string }, fork: ForkInput): ForkFinding {
  const { store, ledger } = host;
  const name = `run ${fork.workflow_id}`;
  const refuse = (detail: string): ForkFinding => ({ ok: false, detail });
  const trace = store.trace(fork.run_id);
  if (trace.length === 0) return refuse(`this host's store has no trace of ${name}: it ran on another host, or the store was pruned`);
  const from = runPaths(host.stateDir, fork.run_id);
  if (!existsSync(join(from.control, 'baseline-manifest.json')))
    return refuse(`${name}'s baseline is not on this host: it ran on another host, or its run folder was removed`);
  const inherited = keptForkPlan(from);
  if (inherited && fork.turn < inherited.turn)
    return refuse(
      `${name} is a fork after turn ${inherited.turn}: its turns up to there are its parent's; fork that run at turn ${fork.turn}`,
    );
  const boundary = turnBoundary(trace, fork.turn, name);
  if ('detail' in boundary) return boundary;
  const { state, seq } = boundary;
  if (state.workspace_digest === null) return refuse(`${name} did not record its workspace's digest after turn ${fork.turn}`);

  const writes: ForkWrite[] = [...(inherited?.writes ?? [])];
  for (const e of trace) {
    if (e.seq >= seq || e.type !== 'action_written') continue;
    if ((e.data as { paths?: unknown }).paths !== undefined)
      return refuse(`${name} merged a task's change by turn ${fork.turn}: a fork of an orchestrating run is not supported`);
    const receipt = e.action_id ? ledger.receipt(e.action_id) : null;
    if (receipt === null || receipt.run_id !== fork.run_id)
      return refuse(`this host's ledger has no receipt of action ${e.action_id ?? '?'} of ${name}`);
    writes.push({ action_id: receipt.action_id, path: receipt.path, before: receipt.before, after: receipt.after });
  }
  const lost = writes.find((w) => store.content(w.after) === null);
  if (lost) return refuse(`this host's store no longer holds the content written to ${lost.path} (${lost.after}) by ${name}`);

  const transcript = transcriptAt(store, fork.transcript, state.transcript);
  if (transcript === undefined) return refuse(`this host's store does not hold ${name}'s transcript up to turn ${fork.turn}`);
  if (fork.replay_digest !== undefined && !store.has(fork.replay_digest))
    return refuse(`this host's store no longer holds ${name}'s replay (${fork.replay_digest})`);
  return {
    ok: true,
    plan: {
      schema_version: 1,
      from_run: fork.run_id,
      turn: fork.turn,
      writes,
      workspace_digest: state.workspace_digest,
      transcript,
      cursor: state.cursor,
    },
  };
}

/**
 * The state the run recorded after `turn`, and the trace position it was recorded at: the first
 * request of the next turn, or the run's end after its last turn.
 */
function turnBoundary(trace: TraceEvent[], turn: number, name: string): { state: TurnState; seq: number } | { ok: false; detail: string } {
  const requests = trace
    .filter((e) => e.type === 'model_requested')
    .map((e) => ({ e, data: e.data as { turn: number; retry?: number; start?: TurnState } }));
  const turns = Math.max(0, ...requests.map((r) => r.data.turn));
  if (turn > turns) return { ok: false, detail: `${name} has ${turns} turns: turn ${turn} is beyond it` };
  const next = requests.find((r) => r.data.turn === turn + 1 && r.data.retry === undefined);
  const end = trace.find((e) => e.type === 'run_finished');
  const found = next
    ? { state: next.data.start, seq: next.e.seq }
    : end
      ? { state: (end.data as { end?: TurnState }).end, seq: end.seq }
      : null;
  if (found === null) return { ok: false, detail: `${name}'s stored trace ends before turn ${turn + 1}: it has not finished` };
  if (found.state === undefined)
    return { ok: false, detail: `${name}'s trace does not record its state after each turn (it ran before forks were possible)` };
  return { state: found.state, seq: found.seq };
}

/** The transcript head `at` names on the chain ending at `head`; undefined when that chain does not hold it. */
function transcriptAt(store: Store, head: string | null, at: TurnState['transcript']): string | null | undefined {
  let links: string[];
  try {
    links = store.transcriptLinks(head);
  } catch (err) {
    if (err instanceof StoreError) return undefined;
    throw err;
  }
  const from = at.head === null ? -1 : links.indexOf(at.head);
  if (at.head !== null && from < 0) return undefined;
  const target = from + at.pending;
  if (target >= links.length) return undefined;
  return target < 0 ? null : links[target];
}
