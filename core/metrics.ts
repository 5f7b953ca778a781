/**
 * The governance metrics, as data: each one's name, kind, labels, buckets and meaning. The
 * workflow records them through the SDK's workflow metric meter (workflows/metrics.ts: nothing is
 * emitted while a history replays, so a replayed run does not count twice), the worker's activity
 * interceptor the queue wait; the worker's Prometheus endpoint takes the buckets from here; the
 * table of metrics in docs/observability.md is `metricsTable()` (tests/metrics.test.ts compares them).
 *
 * Names follow Prometheus conventions: base units (`_seconds`, `_usd`, token counts), `_total`
 * on counters (added by the exporter, `countersTotalSuffix`), and labels whose values come from
 * closed sets, so no label can grow with the number of runs, fixtures or files. Pure data.
 */
import { isRunReason } from './reasons';
import { ERROR_CODES } from './errors';

export interface MetricDef {
  /** The name as created; the exporter adds `_total` to a counter's. */
  name: string;
  kind: 'counter' | 'histogram' | 'gauge';
  valueType: 'int' | 'float';
  labels: readonly string[];
  /** Bucket bounds of a histogram (the SDK's defaults are for milliseconds). */
  buckets?: readonly number[];
  help: string;
}

const counter = (name: string, labels: readonly string[], help: string): MetricDef => ({
  name,
  kind: 'counter',
  valueType: 'int',
  labels,
  help,
});
const gauge = (name: string, help: string): MetricDef => ({ name, kind: 'gauge', valueType: 'float', labels: [], help });
const histogram = (
  name: string,
  valueType: 'int' | 'float',
  labels: readonly string[],
  buckets: readonly number[],
  help: string,
): MetricDef => ({ name, kind: 'histogram', valueType, labels, buckets, help });

export const METRICS = {
  runsFinished: counter(
    'agent_runs_finished',
    ['status', 'reason', 'role'],
    'runs ended, by status and reason (`none` for a completed run); `role` is `run`, or `task` for a sub-run',
  ),
  runTurns: histogram(
    'agent_run_turns',
    'int',
    ['status'],
    [1, 2, 5, 10, 20, 50, 100, 200, 500],
    'turns per run (decisions asked for), recorded when it ends',
  ),
  limitHits: counter(
    'agent_limit_hits',
    ['limit'],
    'runs stopped by a limit: `max_turns`, `max_tool_calls`, `deadline`, `max_model_tokens`, `max_cost_usd`, `approval_timeout`',
  ),
  toolCalls: counter('agent_tool_calls', ['tool'], 'tool calls proposed, by tool (`invalid` for a call that did not validate)'),
  toolErrors: counter('agent_tool_errors', ['code'], 'tool results with an error code the model saw (SPEC section 3 codes)'),
  modelRetries: counter('agent_model_retries', [], 'retries of transient model errors'),
  modelRetryDelay: histogram(
    'agent_model_retry_delay_seconds',
    'float',
    [],
    [0, 0.5, 1, 2, 5, 10, 30, 60],
    "the delay before each retry (the provider's `retry-after`, or the backoff)",
  ),
  approvalWait: histogram(
    'agent_approval_wait_seconds',
    'float',
    ['decision'],
    [1, 10, 60, 300, 1800, 3600, 14400, 86400, 604800],
    'how long a write waited for a person: `approve`, `reject`, `interrupted`, `timeout`',
  ),
  queueWait: histogram(
    'agent_activity_queue_wait_seconds',
    'float',
    [],
    [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60],
    "schedule-to-start of each activity attempt, by the SDK's `activity_type` and `task_queue` (a host's own queue: which host was waited for); from its scheduling (server clock) to its start on the worker (worker clock)",
  ),
  cancellations: counter(
    'agent_cancellations',
    ['kind'],
    'runs cancelled: `cancelled` (a cancel request), `interrupted` (a task stopped by its parent)',
  ),
  timeouts: counter(
    'agent_timeouts',
    ['kind'],
    "timeouts: `deadline` (the run's), `approval`, `host_lost` (no worker of the run's host took a task), `tool` (a test run cut by its call limit)",
  ),
  modelCalls: counter('agent_model_calls', ['provider'], 'live model calls answered (a replay makes none)'),
  modelTokens: counter('agent_model_tokens', ['kind'], 'tokens of live model calls: `input` (cached included), `output`, `cached`'),
  contextTokens: histogram(
    'agent_model_input_tokens',
    'int',
    [],
    [1000, 2000, 4000, 8000, 16000, 32000, 64000, 128000, 256000],
    'context size: input tokens of each live model call',
  ),
  compactions: counter('agent_context_compactions', [], 'live contexts compacted after the provider said they were too long'),
  promptCacheHits: counter('agent_prompt_cache_hits', [], 'live model calls with cached input tokens > 0'),
  runCost: histogram(
    'agent_run_cost_usd',
    'float',
    [],
    [0.001, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 50],
    'cost of each priced run in US dollars (its `_sum` is the total spent); runs without a price are not recorded',
  ),
  eventLoopDelay: gauge(
    'agent_event_loop_delay_max_seconds',
    "the worker process's largest event-loop delay over the last second: how long a heartbeat, a Query or another run's step waited on it",
  ),
} as const satisfies Record<string, MetricDef>;

/** A run's reason as a label value: `none`, one of the known reasons, or `other`. */
export function reasonLabel(reason: string | null): string {
  if (reason === null || reason === '') return 'none';
  return isRunReason(reason) ? reason : 'other';
}

/** A tool error code as a label value: one of the closed set, or `other`. */
export function codeLabel(code: string): string {
  return Object.prototype.hasOwnProperty.call(ERROR_CODES, code) ? code : 'other';
}

/** Tag names in snake_case (`taskQueue` → `task_queue`), as Prometheus conventions want. */
export function snakeCaseTags<T extends Record<string, unknown>>(tags: T): T {
  return Object.fromEntries(Object.entries(tags).map(([k, v]) => [k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`), v])) as T;
}

/** The name as Prometheus shows it. */
export const exposedName = (m: MetricDef) => (m.kind === 'counter' ? `${m.name}_total` : m.name);

/** Histogram buckets by metric name, for the Prometheus exporter. */
export function histogramBuckets(): Record<string, number[]> {
  return Object.fromEntries(
    Object.values(METRICS as Record<string, MetricDef>).flatMap((m) => (m.buckets ? [[m.name, [...m.buckets]]] : [])),
  );
}

/** The table of governance metrics of docs/observability.md. */
export function metricsTable(): string {
  const rows = Object.values(METRICS as Record<string, MetricDef>).map(
    (m) => `| \`${exposedName(m)}\` | ${m.kind} | ${m.labels.map((l) => `\`${l}\``).join(', ') || '-'} | ${m.help} |`,
  );
  return ['| metric | kind | labels | meaning |', '|---|---|---|---|', ...rows].join('\n');
}
