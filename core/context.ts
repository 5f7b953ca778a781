/**
 * The context a live model sees, rebuilt for every request from the run's authoritative state,
 * not from accumulated chat text: a summary regenerated from state, then the most recent complete
 * reply groups (a model reply's calls with their results, never separated) that fit the budget,
 * the latest failed call kept first, oversized results cut to their structure, and an explicit
 * note of what was left out. Pure and deterministic; the store keeps every raw payload.
 */
import { canonicalJson } from './canonical';
import type { Budgets, PendingAction, RunSpec, ToolResult, VerifierFindings } from './contracts';
import type { TaskView } from './run-view';
import { rosterLine } from './tasks';

/** What the summary is regenerated from: facts the workflow holds, never the model's own words. */
export interface RunFacts {
  task: string;
  writable: string[];
  new_files: string[];
  /** A repository run's protected patterns (its writable and new files are patterns too). */
  protected?: string[];
  /** A repository run's project instructions (AGENTS.md, capped), by their digest in the host store. */
  instructions?: string | null;
  status: string;
  turn: number;
  counters: { turns: number; tool_calls: number; writes: number };
  budgets: Budgets;
  /** The latest plan the model stated. */
  plan: string | null;
  pending_action: Pick<PendingAction, 'action_id' | 'path' | 'before' | 'after'> | null;
  verification: Pick<VerifierFindings, 'passed' | 'protected_changed' | 'candidate_tests' | 'acceptance'> | null;
  /** A note for the next request, e.g. that the previous reply was cut off by the output limit. */
  notice: string | null;
  /** An orchestrating run's tasks (the roster); absent or null when sub-runs are off. */
  tasks?: TaskView[] | null;
  /** The run may call the orchestration tools. */
  orchestrating?: boolean;
}

export function runFacts(spec: RunSpec, facts: Omit<RunFacts, 'task' | 'writable' | 'new_files' | 'protected'>): RunFacts {
  const rules = spec.writable_match === 'pattern' ? { protected: spec.protected ?? [] } : {};
  return { task: spec.task, writable: spec.writable, new_files: spec.new_files, ...rules, ...facts };
}

/** One call of a reply with its one result. `id` is the provider's id of the call. */
export interface ContextCall {
  id: string;
  name: string;
  arguments: unknown;
  result: ToolResult;
}

/** One step of the conversation: a model reply (text and/or calls), or a user message. */
export type ContextGroup = { kind: 'reply'; text: string | null; calls: ContextCall[] } | { kind: 'message'; text: string; pinned?: true };

/** Groups compaction never drops: messages about tasks, and replies that dispatched one. */
export const isPinned = (g: ContextGroup) => (g.kind === 'message' ? g.pinned === true : g.calls.some((c) => c.name === 'dispatch_task'));

export interface BuiltContext {
  /**
   * The part of the summary that is the same on every request of a run: the task and its rules.
   * Providers cache the prompt up to here (system prompt, tools, this).
   */
  stable: string;
  /** The part that changes from turn to turn: the run state, the tasks, notes and the compaction note. */
  state: string;
  /** The whole summary, `stable` then `state`: the first user message as the model reads it. */
  summary: string;
  groups: ContextGroup[];
  /** Null when nothing was left out or cut. */
  compaction: { omitted_groups: number; shortened_results: number; note: string } | null;
  estimated_tokens: number;
}

/** A deterministic estimate: four characters of JSON per token. */
export const estimateTokens = (value: unknown): number => Math.ceil((typeof value === 'string' ? value : canonicalJson(value)).length / 4);

const HEAD_TAIL = 600;

/** A result over the cap keeps its envelope, its small fields and the head and tail of its big ones. */
export function shortenResult(result: ToolResult, maxTokens: number): { result: ToolResult; shortened: boolean } {
  if (estimateTokens(result) <= maxTokens) return { result, shortened: false };
  const cut = (v: unknown): unknown => {
    if (typeof v === 'string')
      return v.length <= 2 * HEAD_TAIL
        ? v
        : `${v.slice(0, HEAD_TAIL)}\n… [${v.length - 2 * HEAD_TAIL} characters left out; the full result is kept by the harness] …\n${v.slice(-HEAD_TAIL)}`;
    if (Array.isArray(v)) return v.length <= 10 ? v.map(cut) : [...v.slice(0, 10).map(cut), `… ${v.length - 10} more entries left out`];
    if (v !== null && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, cut(x)]));
    return v;
  };
  return { result: { ...result, data: cut(result.data), truncated: true }, shortened: true };
}

/** The task and its rules: the same on every request of a run (a cached prefix). */
export function stableText(facts: RunFacts): string {
  const rules =
    facts.protected === undefined
      ? [
          `Files you may change: ${facts.writable.join(', ') || '(none)'}`,
          `New files you may create (patterns, * within one path segment): ${facts.new_files.join(', ') || '(none)'}`,
          'Every other path is protected.',
        ]
      : [
          `Files you may change (patterns: * within one path segment, ** across segments): ${facts.writable.join(', ') || '(none)'}`,
          `New files you may create (patterns): ${facts.new_files.join(', ') || '(none)'}`,
          `Protected, whatever the patterns above say: ${facts.protected.join(', ') || '(none)'}`,
        ];
  return [`Task: ${facts.task}`, '', ...rules].join('\n');
}

/** The task and rules, then the run state. */
export function summaryText(facts: RunFacts): string {
  return `${stableText(facts)}\n\n${stateText(facts)}`;
}

/** What changes from turn to turn: status, counters and budgets left, plan, pending action, verification, tasks, notes. */
export function stateText(facts: RunFacts): string {
  const lines = [
    '## Run state (regenerated by the harness from its own records; it is authoritative)',
    `- status: ${facts.status}; turn ${facts.turn} of at most ${facts.budgets.max_turns}`,
    `- tool calls used: ${facts.counters.tool_calls} of ${facts.budgets.max_tool_calls}; writes done: ${facts.counters.writes}`,
    `- your latest plan: ${facts.plan ?? '(none stated)'}`,
    `- pending action: ${facts.pending_action ? `${facts.pending_action.path} (action ${facts.pending_action.action_id})` : 'none'}`,
  ];
  if (facts.verification) {
    const v = facts.verification;
    lines.push(
      `- last verification: ${v.passed ? 'passed' : 'failed'}; candidate tests ${v.candidate_tests.passed}/${v.candidate_tests.discovered} passed; ` +
        `${v.acceptance ? `hidden acceptance ${v.acceptance.passed}/${v.acceptance.total}` : 'no hidden acceptance'}; protected paths changed: ${v.protected_changed.join(', ') || 'none'}`,
    );
  }
  if (facts.tasks) {
    // The roster and every dispatch's outcome live here, in the part of the context that is always kept.
    lines.push('', '## Your tasks (sub-runs; copy their ids, never invent one)');
    lines.push(...(facts.tasks.length ? facts.tasks.map(rosterLine) : ['- (none dispatched)']));
  }
  if (facts.notice) lines.push('', `Note: ${facts.notice}`);
  return lines.join('\n');
}

const isFailure = (g: ContextGroup) => g.kind === 'reply' && g.calls.some((c) => !c.result.ok);

/**
 * Builds the context within `budgetTokens` (what is left after the tool definitions and the
 * reserved output). The summary always goes in; then groups newest first, the latest failed one
 * before all others; each result is cut to a quarter of the budget at most.
 */
export function buildContext(facts: RunFacts, groups: ContextGroup[], budgetTokens: number): BuiltContext {
  const perResult = Math.max(256, Math.floor(budgetTokens / 4));
  let shortened = 0;
  const fitted = groups.map((g): ContextGroup => {
    if (g.kind !== 'reply') return g;
    return {
      ...g,
      calls: g.calls.map((c) => {
        const s = shortenResult(c.result, perResult);
        if (s.shortened) shortened++;
        return { ...c, result: s.result };
      }),
    };
  });

  const stable = stableText(facts);
  const base = summaryText(facts);
  const noteRoom = 120; // tokens kept for the compaction note
  let used = estimateTokens(base) + noteRoom;
  const chosen = new Set<number>();
  const take = (i: number): boolean => {
    const cost = estimateTokens(fitted[i]);
    if (used + cost > budgetTokens) return false;
    used += cost;
    chosen.add(i);
    return true;
  };
  // Pinned groups first (an orchestrator's dispatches and its tasks' results), then the latest failure.
  for (let i = 0; i < fitted.length; i++) if (isPinned(fitted[i])) take(i);
  let latestFailure = -1;
  for (let i = fitted.length - 1; i >= 0; i--)
    if (isFailure(fitted[i])) {
      latestFailure = i;
      break;
    }
  if (latestFailure >= 0 && !chosen.has(latestFailure)) take(latestFailure);
  for (let i = fitted.length - 1; i >= 0; i--) {
    if (chosen.has(i)) continue;
    if (!take(i)) break;
  }
  const kept = fitted.filter((_, i) => chosen.has(i));
  const omitted = fitted.length - kept.length;
  let compaction: BuiltContext['compaction'] = null;
  let state = stateText(facts);
  if (omitted > 0 || shortened > 0) {
    const parts = [];
    if (omitted > 0) parts.push(`${omitted} earlier step(s) of this run are left out to fit the context`);
    if (shortened > 0) parts.push(`${shortened} long tool result(s) are shortened to their head and tail`);
    const note = `history_compaction: ${parts.join('; ')}. The run state above is authoritative; read files again when you need their current content.`;
    compaction = { omitted_groups: omitted, shortened_results: shortened, note };
    state = `${state}\n\n${note}`;
  }
  const summary = `${stable}\n\n${state}`;
  return {
    stable,
    state,
    summary,
    groups: kept,
    compaction,
    estimated_tokens: estimateTokens(summary) + kept.reduce((n, g) => n + estimateTokens(g), 0),
  };
}
