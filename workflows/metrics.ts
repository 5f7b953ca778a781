/**
 * The governance metrics a run records (core/metrics.ts names them), through the SDK's workflow
 * metric meter: nothing is emitted while a history replays, so a run replayed after an eviction
 * or a worker's crash counts once. Each method is one fact at the place the workflow learns it.
 */
import type { MetricCounter, MetricHistogram } from '@temporalio/common';
import { metricMeter } from '@temporalio/workflow';
import type { RunStatus, ToolResult, Usage } from '../core/contracts';
import { codeLabel, METRICS, reasonLabel, type MetricDef } from '../core/metrics';

const TIMEOUT_REASONS: Record<string, string> = { deadline: 'deadline', approval_timeout: 'approval', host_lost: 'host_lost' };

export class RunMetrics {
  private readonly counters = new Map<string, MetricCounter>();
  private readonly histograms = new Map<string, MetricHistogram>();

  private counter(m: MetricDef): MetricCounter {
    let c = this.counters.get(m.name);
    if (c === undefined) this.counters.set(m.name, (c = metricMeter.createCounter(m.name, '', m.help)));
    return c;
  }

  private histogram(m: MetricDef): MetricHistogram {
    let h = this.histograms.get(m.name);
    if (h === undefined) this.histograms.set(m.name, (h = metricMeter.createHistogram(m.name, m.valueType, '', m.help)));
    return h;
  }

  /** A call proposed (counted against the tool-call limit). */
  toolCall(tool: string | null): void {
    this.counter(METRICS.toolCalls).add(1, { tool: tool ?? 'invalid' });
  }

  /** A result the model sees. */
  toolResult(result: Pick<ToolResult, 'error' | 'data'>): void {
    if (result.error === null) return;
    this.counter(METRICS.toolErrors).add(1, { code: codeLabel(result.error) });
    if (result.error === 'tests_incomplete' && (result.data as { status?: unknown } | null)?.status === 'timeout')
      this.counter(METRICS.timeouts).add(1, { kind: 'tool' });
  }

  modelRetry(delayMs: number): void {
    this.counter(METRICS.modelRetries).add(1);
    this.histogram(METRICS.modelRetryDelay).record(delayMs / 1000);
  }

  /** A live model call's usage, and whether its context had to be compacted. */
  modelCall(provider: string, usage: Usage, compacted: boolean): void {
    this.counter(METRICS.modelCalls).add(usage.model_calls, { provider });
    const tokens = this.counter(METRICS.modelTokens);
    tokens.add(usage.input_tokens, { kind: 'input' });
    tokens.add(usage.output_tokens, { kind: 'output' });
    tokens.add(usage.cached_tokens, { kind: 'cached' });
    this.histogram(METRICS.contextTokens).record(usage.input_tokens);
    if (usage.cached_tokens > 0) this.counter(METRICS.promptCacheHits).add(1);
    if (compacted) this.counter(METRICS.compactions).add(1);
  }

  /** A person's decision on a write (or none), `seconds` after it was first asked. */
  approvalWait(seconds: number, decision: 'approve' | 'reject' | 'interrupted' | 'timeout'): void {
    this.histogram(METRICS.approvalWait).record(Math.max(0, seconds), { decision });
  }

  /** The run's end. */
  finished(o: {
    status: RunStatus;
    reason: string | null;
    turns: number;
    task: boolean;
    deadlineReached: boolean;
    costUsd: number | null;
  }): void {
    const reason = reasonLabel(o.reason);
    this.counter(METRICS.runsFinished).add(1, { status: o.status, reason, role: o.task ? 'task' : 'run' });
    this.histogram(METRICS.runTurns).record(o.turns, { status: o.status });
    if (o.status === 'budget_exhausted') this.counter(METRICS.limitHits).add(1, { limit: reason });
    if (o.status === 'cancelled')
      this.counter(METRICS.cancellations).add(1, { kind: reason === 'interrupted' ? 'interrupted' : 'cancelled' });
    const timeout = TIMEOUT_REASONS[o.reason ?? ''] ?? (o.deadlineReached ? 'deadline' : undefined);
    if (timeout !== undefined) this.counter(METRICS.timeouts).add(1, { kind: timeout });
    if (o.costUsd !== null) this.histogram(METRICS.runCost).record(o.costUsd);
  }
}
