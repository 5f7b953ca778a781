/**
 * agentRun's decisions: a model turn ("decide" means this and only this) and what comes before and
 * with it: the budgets that stop the run before its next decision (`limit`, over what the run
 * `used`, its tasks' included), the request with the messages that arrived (`requestDecision`),
 * retries of transient errors, the usage and prompt-cache facts, a call that could cost more than
 * the budget has left (`overBudget`), the facts a live model's context is rebuilt from, and the
 * one decision with tools disabled after the turn limit (`wrapUp`). It touches the run's state and
 * trace through `DecideRun`; what the decisions then do is the loop's (agentRun.ts `runReply`).
 */
import * as wf from '@temporalio/workflow';
import { runFacts, type RunFacts } from '../core/context';
import { budgetStop, callTimeoutMs, type BudgetStop, type BudgetUse } from '../core/budgets';
import { addUsage, errorResult, type ToolResult } from '../core/contracts';
import type { TurnState } from '../core/trace';
import type { DecisionView } from '../core/transcript';
import type { DecideResult, Elsewhere } from '../core/activities';
import { LEGACY_CHANGES } from './changes';
import { local, noteBuild, Phase, RunStop, type RunBase } from './run-base';
import type { Orchestration } from './subruns';

const MAX_MODEL_RETRIES = 2;

/** What a model turn needs of the run beyond `RunBase`. */
export interface DecideRun extends RunBase {
  /** The tasks of an orchestrating run (what they hold of the budgets, the next to end). */
  readonly tasks: Orchestration;
  /** A read-only step: the local activity's answer, or the run's host's when it ran elsewhere. */
  readOnly<T extends object>(here: () => Promise<T | Elsewhere>, onHost: () => Promise<T>): Promise<T>;
  /** Where the run stands now (see TurnState). */
  turnState(): TurnState;
  /** The one result of the call in flight. */
  observe(result: ToolResult, counted?: boolean): void;
}

export class Decisions extends Phase<DecideRun> {
  /**
   * What counts against the run's budgets: its own turns, tool calls, tokens and cost and, for an
   * orchestrating run, what its tasks spent and (`held`) what the running ones hold.
   */
  used(held = true): BudgetUse {
    const counters = this.view.counters;
    const own: BudgetUse = {
      turns: counters.turns,
      tool_calls: counters.tool_calls,
      tokens: this.view.usage,
      cost_usd: this.view.usage?.cost_usd ?? null,
    };
    if (!this.state.tree_budgets) return own;
    const spent = this.view.tasks_spent!;
    const holding = held ? this.run.tasks.held() : { turns: 0, tool_calls: 0, cost_usd: 0 };
    return {
      ...own,
      turns: own.turns + spent.turns + holding.turns,
      tool_calls: own.tool_calls + spent.tool_calls + holding.tool_calls,
      cost_usd: (own.cost_usd ?? 0) + (spent.usage?.cost_usd ?? 0) + holding.cost_usd,
    };
  }

  /**
   * The budget that stops the run before its next decision, or null. When only what running tasks
   * hold stands in the way, the run first waits for them to end and give back what they did not use.
   */
  async limit(): Promise<BudgetStop | null> {
    for (;;) {
      const limit = budgetStop(this.budgets, this.used(), this.run.msLeft());
      if (limit === null || !this.state.tree_budgets || !this.run.tasks.active()) return limit;
      if (budgetStop(this.budgets, this.used(false), this.run.msLeft()) !== null) return limit;
      this.trace.add('budget_wait', { budget: limit, held: this.run.tasks.held() });
      await this.run.tasks.nextEnd();
    }
  }

  /**
   * Asks the decision source for the next reply (one decision for a replay, one or more for a
   * live model), retrying transient errors at most twice, after the delay the provider asked for.
   */
  async decide(toolsEnabled: boolean): Promise<DecisionView[]> {
    const source = this.state.source!;
    const live = source.kind === 'provider';
    for (let retries = 0; ;) {
      const result = await this.requestDecision(toolsEnabled, retries);
      this.state.transcript = { head: result.head, append: [] };
      noteBuild(this.view, result.build);
      if (result.usage) {
        this.addUsage(result, retries);
        if (live) this.metrics.modelCall(source.provider, result.usage, 'compacted' in result && result.compacted === true);
      }
      switch (result.kind) {
        case 'exhausted':
          throw new RunStop('failed', 'replay_exhausted', 'the replay has no decision left');
        case 'refused':
          throw new RunStop('failed', 'model_refused', result.detail);
        case 'over_budget':
          await this.overBudget(result);
          continue;
        case 'decisions':
          this.state.cursor = result.cursor;
          this.state.notice = null;
          return result.decisions;
        case 'model_error': {
          this.state.cursor = result.cursor;
          if (result.ref !== null) this.state.transcript.append.push({ decision: result.ref });
          if (!result.transient) throw new RunStop('failed', 'model_error', result.detail);
          if (retries >= MAX_MODEL_RETRIES)
            throw new RunStop('failed', 'model_error', `transient errors persisted after ${MAX_MODEL_RETRIES} retries: ${result.detail}`);
          this.view.counters.model_retries++;
          const delay = result.retry_after_ms ?? (live ? 500 * 2 ** retries : 0);
          this.metrics.modelRetry(delay);
          this.trace.add('model_retry', { attempt: retries + 1, detail: result.detail, delay_ms: delay });
          this.state.notice = result.cut_off
            ? 'your previous reply was cut off by the output limit and none of its calls ran; keep each reply and each call shorter'
            : null;
          if (delay > 0) await wf.sleep(delay);
          retries++;
        }
      }
    }
  }

  /** One request to the decision source: the messages that arrived, traced, then the activity (a local one for a replay). */
  private async requestDecision(toolsEnabled: boolean, retries: number): Promise<DecideResult> {
    const source = this.state.source!;
    const live = source.kind === 'provider';
    // What the turn starts from (a fork after the previous turn restores it): before this request's messages.
    const start = retries === 0 && toolsEnabled && this.changes.has(LEGACY_CHANGES.turnState) ? { start: this.run.turnState() } : {};
    // An interrupt that arrived while no turn ran (loading, between turns, a continue-as-new) has
    // nothing to stop: the model reads it with this request, and its reply runs.
    if (this.state.prompt_messages && this.state.interrupted !== null) {
      this.state.steering.push(`interrupt: ${this.state.interrupted}`);
      this.state.interrupted = null;
    }
    const messages = this.state.steering.splice(0);
    for (const message of messages) this.state.transcript.append.push({ message });
    // Messages about tasks are pinned: compaction never drops them.
    const notes = this.state.task_messages.splice(0);
    for (const message of notes) this.state.transcript.append.push({ message, pinned: true });
    // A live request names the prompt version it is built with (absent in runs that started before prompts were versioned).
    const prompt = live && this.view.prompt ? { prompt_version: this.view.prompt.version, prompt_digest: this.view.prompt.digest } : {};
    this.trace.add('model_requested', {
      turn: this.view.counters.turns,
      tools_enabled: toolsEnabled,
      messages: [...messages, ...notes],
      ...prompt,
      ...(retries > 0 ? { retry: retries } : {}),
      ...start,
    });
    // A replay's read-only call is run with its decision, one step instead of two, while the run
    // could still take its result (the loop's toolCall decides whether it does).
    const readAhead = !live && toolsEnabled && this.used().tool_calls < this.budgets.max_tool_calls;
    const callMs = this.budgets.call_timeout_s * 1000;
    const input = {
      run_id: this.ref.run_id,
      source,
      cursor: this.state.cursor,
      turn: this.view.counters.turns,
      retry: retries,
      tools_enabled: toolsEnabled,
      orchestrating: this.state.subruns !== null,
      tasks:
        this.state.subruns !== null ? Object.fromEntries((this.view.subruns?.tasks ?? []).map((t) => [t.title, t.task_id])) : undefined,
      transcript: this.state.transcript,
      facts: live ? this.facts(toolsEnabled) : null,
      ...(live && this.budgets.max_cost_usd !== undefined
        ? { cost_room_usd: this.budgets.max_cost_usd - (this.used().cost_usd ?? 0) }
        : {}),
      ...(readAhead ? { read_ahead: { ref: this.ref, timeout_ms: callMs } } : {}),
    };
    const options = {
      // A call run with the decision has its own limit besides the decision's, as when it runs alone.
      startToCloseTimeout: callTimeoutMs(this.budgets, this.run.msLeft()) + (readAhead ? callMs + 5000 : 0),
      summary: `decide turn ${this.view.counters.turns}`,
    };
    return live
      ? // A live request heartbeats, so a cancelled run aborts it.
        await this.act.decide.executeWithOptions(
          { ...options, heartbeatTimeout: '10 seconds', cancellationType: wf.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED },
          [input],
        )
      : await this.run.readOnly(
          () => local.localDecide.executeWithOptions(options, [this.state.host_queue, input]),
          () => this.act.decide.executeWithOptions(options, [input]),
        );
  }

  /**
   * The next call could cost more than the budget has left. Tasks hold part of it: once one gives
   * back what it did not use, the caller asks again; otherwise the run ends at its budget.
   */
  private async overBudget(result: Extract<DecideResult, { kind: 'over_budget' }>): Promise<void> {
    if (this.state.tree_budgets && this.run.tasks.active() && result.estimate_usd <= result.room_usd + this.run.tasks.held().cost_usd) {
      this.trace.add('budget_wait', { budget: 'max_cost_usd', next_call_usd: result.estimate_usd, room_usd: result.room_usd });
      await this.run.tasks.nextEnd();
      return;
    }
    this.view.cost_limit = {
      max_cost_usd: this.budgets.max_cost_usd!,
      spent_usd: this.budgets.max_cost_usd! - result.room_usd,
      next_call_usd: result.estimate_usd,
    };
    throw new RunStop(
      'budget_exhausted',
      'max_cost_usd',
      `the next call could cost up to $${result.estimate_usd.toFixed(6)}, and $${result.room_usd.toFixed(6)} of max_cost_usd is left`,
    );
  }

  /** The authoritative facts a live model's context is rebuilt from. */
  private facts(toolsEnabled: boolean): RunFacts {
    const v = this.view.verification;
    const pending = this.view.pending_approval;
    return runFacts(this.ref.fixture, {
      ...(this.ref.instructions ? { instructions: this.ref.instructions } : {}),
      status: this.view.status,
      turn: this.view.counters.turns,
      counters: { turns: this.view.counters.turns, tool_calls: this.view.counters.tool_calls, writes: this.view.counters.writes },
      budgets: this.budgets,
      plan: this.state.plan,
      pending_action: pending ? { action_id: pending.action_id, path: pending.path, before: pending.before, after: pending.after } : null,
      verification: v
        ? { passed: v.passed, protected_changed: v.protected_changed, candidate_tests: v.candidate_tests, acceptance: v.acceptance }
        : null,
      notice: toolsEnabled
        ? this.state.notice
        : 'the turn limit is reached and tools are disabled: reply without tool calls, with a summary of what was done and what is left',
      tasks: this.view.subruns?.tasks ?? null,
      orchestrating: this.state.subruns !== null,
    });
  }

  /** One call's usage added to the run's; a live call's prompt-cache facts counted and traced. */
  private addUsage(result: DecideResult, retry: number): void {
    const step = result.usage!;
    this.view.usage = addUsage(this.view.usage, step);
    if (result.kind === 'exhausted' || result.kind === 'over_budget' || result.cache === undefined) return;
    const cache = result.cache;
    const counted = (this.view.prompt_cache ??= { hits: 0, write_tokens: 0 });
    if (cache.hit) counted.hits++;
    counted.write_tokens += cache.write_tokens;
    this.trace.add('model_usage', {
      turn: this.view.counters.turns,
      ...(retry > 0 ? { retry } : {}),
      input_tokens: step.input_tokens,
      output_tokens: step.output_tokens,
      cached_tokens: step.cached_tokens,
      cache_write_tokens: cache.write_tokens,
      cache_hit: cache.hit,
      cost_usd: step.cost_usd,
      from_store: result.from_store === true,
    });
  }

  /** After the turn limit: one more decision with tools disabled, kept as the run's summary. */
  async wrapUp(): Promise<void> {
    try {
      for (const decision of await this.decide(false)) {
        if (decision.kind === 'final') this.view.wrap_up = decision.text;
        if (decision.kind !== 'tool') {
          this.state.transcript.append.push({ decision: decision.ref, reply: decision.reply });
          continue;
        }
        // Tools are disabled: a call still gets its one result, and does not run.
        this.state.in_flight = {
          call_id: decision.call?.call_id ?? decision.invalid!.call_id,
          decision_ref: decision.ref,
          reply: decision.reply,
        };
        this.run.observe(
          errorResult(this.state.in_flight.call_id, 'interrupted', { reason: 'not executed: tools are disabled after the turn limit' }),
          false,
        );
      }
      this.trace.add('wrap_up_recorded', { summary: this.view.wrap_up });
    } catch (err) {
      if (!(err instanceof RunStop)) throw err;
      this.trace.add('wrap_up_recorded', { summary: null, error: err.reason });
    }
  }
}
