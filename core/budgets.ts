import type { Budgets } from './contracts';

/** A run's budgets: the fixture's defaults, overridden field by field by the run's input. */
export function effectiveBudgets(defaults: Budgets, override: Partial<Budgets> | undefined): Budgets {
  return { ...defaults, ...Object.fromEntries(Object.entries(override ?? {}).filter(([, v]) => v !== undefined)) };
}

export type BudgetStop = 'max_turns' | 'max_tool_calls' | 'deadline' | 'max_model_tokens';

/** Limits are checked before each decision is requested. */
export function budgetStop(
  budgets: Budgets,
  used: { turns: number; tool_calls: number },
  msLeft: number,
  tokens: { input_tokens: number; output_tokens: number } | null = null,
): BudgetStop | null {
  if (msLeft <= 0) return 'deadline';
  if (used.turns >= budgets.max_turns) return 'max_turns';
  if (used.tool_calls >= budgets.max_tool_calls) return 'max_tool_calls';
  if (budgets.max_model_tokens !== undefined && tokens !== null && tokens.input_tokens + tokens.output_tokens >= budgets.max_model_tokens)
    return 'max_model_tokens';
  return null;
}

/** Per-call timeout: the smaller of the time left and the call limit, never below one second. */
export function callTimeoutMs(budgets: Budgets, msLeft: number): number {
  return Math.max(1000, Math.min(msLeft, budgets.call_timeout_s * 1000));
}
