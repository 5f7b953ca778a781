import type { Budgets } from './contracts';

/** What an optional budget is when a run leaves it out: the harness's own value (the others are no limit). */
export const BUDGET_DEFAULTS = {
  context_budget_tokens: 60_000,
  max_output_tokens: 4_096,
  approval_timeout_s: 7 * 24 * 3600,
} as const satisfies Partial<Budgets>;

/**
 * The operator's maximums when `AGENT_MAX_BUDGETS` names none: generous for one run, finite for
 * every run a worker takes (a fixture's, a repository's, a user's).
 */
export const DEFAULT_MAX_BUDGETS = {
  max_turns: 2_000,
  max_tool_calls: 5_000,
  deadline_s: 24 * 3600,
  call_timeout_s: 3600,
  approval_timeout_s: 30 * 24 * 3600,
} as const satisfies Partial<Budgets>;

/** A run's budgets: the fixture's defaults, overridden field by field by the run's input. */
export function effectiveBudgets(defaults: Budgets, override: Partial<Budgets> | undefined): Budgets {
  return { ...defaults, ...Object.fromEntries(Object.entries(override ?? {}).filter(([, v]) => v !== undefined)) };
}

/** A budget the operator's maximum lowered: what was asked (null: no limit) and the maximum it got. */
export interface CappedBudget {
  field: keyof Budgets;
  asked: number | null;
  max: number;
}

/**
 * The budgets within the operator's maximums. A field over its maximum, or left without a limit
 * where the operator sets one (`max_model_tokens`, `max_cost_usd`), takes the maximum, and is
 * named in `capped`; a run is never refused for asking too much.
 */
export function capBudgets(budgets: Budgets, max: Partial<Budgets>): { budgets: Budgets; capped: CappedBudget[] } {
  const out: Budgets = { ...budgets };
  const capped: CappedBudget[] = [];
  for (const [field, limit] of Object.entries(max) as [keyof Budgets, number | undefined][]) {
    if (limit === undefined) continue;
    const asked: number | null = budgets[field] ?? (BUDGET_DEFAULTS as Partial<Budgets>)[field] ?? null;
    if (asked !== null && asked <= limit) continue;
    out[field] = limit;
    capped.push({ field, asked, max: limit });
  }
  return { budgets: out, capped };
}

export type BudgetStop = 'max_turns' | 'max_tool_calls' | 'deadline' | 'max_model_tokens' | 'max_cost_usd';

/** What counts against a run's budgets: its own turns and tool calls (an orchestrating run adds its tasks'), tokens and cost. */
export interface BudgetUse {
  turns: number;
  tool_calls: number;
  /** Null for a run without model usage. */
  tokens?: { input_tokens: number; output_tokens: number } | null;
  /** US dollars spent (or held by running tasks); null when nothing is priced. */
  cost_usd?: number | null;
}

/** Limits are checked before each decision is requested. */
export function budgetStop(budgets: Budgets, used: BudgetUse, msLeft: number): BudgetStop | null {
  if (msLeft <= 0) return 'deadline';
  if (used.turns >= budgets.max_turns) return 'max_turns';
  if (used.tool_calls >= budgets.max_tool_calls) return 'max_tool_calls';
  const tokens = used.tokens ?? null;
  if (budgets.max_model_tokens !== undefined && tokens !== null && tokens.input_tokens + tokens.output_tokens >= budgets.max_model_tokens)
    return 'max_model_tokens';
  if (budgets.max_cost_usd !== undefined && (used.cost_usd ?? 0) >= budgets.max_cost_usd) return 'max_cost_usd';
  return null;
}

/** Per-call timeout: the smaller of the time left and the call limit, never below one second. */
export function callTimeoutMs(budgets: Budgets, msLeft: number): number {
  return Math.max(1000, Math.min(msLeft, budgets.call_timeout_s * 1000));
}

/** The part of an orchestrating run's budgets a task's run gets. */
export interface Allotment {
  max_turns: number;
  max_tool_calls: number;
  max_cost_usd?: number;
}

/**
 * What a dispatch reserves for its task out of the tree's budgets: an equal share of what the tree
 * has neither spent nor reserved, split among the task slots still free (`freeSlots`, this one
 * included) and the orchestrating run itself, which keeps a share for its own next steps. Turns
 * and tool calls are whole; a share of less than one turn (or no money) refuses the dispatch.
 */
export function taskAllotment(
  budgets: Budgets,
  used: { turns: number; tool_calls: number; cost_usd: number },
  freeSlots: number,
): { ok: true; allotment: Allotment } | { ok: false; detail: string } {
  const parts = Math.max(1, freeSlots) + 1;
  const turns = Math.floor((budgets.max_turns - used.turns) / parts);
  const toolCalls = Math.max(0, Math.floor((budgets.max_tool_calls - used.tool_calls) / parts));
  if (turns < 1)
    return {
      ok: false,
      detail: `the run has ${Math.max(0, budgets.max_turns - used.turns)} of its ${budgets.max_turns} turns neither spent nor held by its tasks: too few to share with another task`,
    };
  if (budgets.max_cost_usd === undefined) return { ok: true, allotment: { max_turns: turns, max_tool_calls: toolCalls } };
  const cost = (budgets.max_cost_usd - used.cost_usd) / parts;
  if (!(cost > 0))
    return {
      ok: false,
      detail: `the run's cost budget of $${budgets.max_cost_usd} is spent or held by its tasks: nothing left to give another task`,
    };
  return { ok: true, allotment: { max_turns: turns, max_tool_calls: toolCalls, max_cost_usd: cost } };
}
