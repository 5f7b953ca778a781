/**
 * The worker's share of traces and metrics: the activity interceptors and the sink the workflow
 * interceptors export their spans through (workflows/interceptors.ts is the workflow side), and the
 * Prometheus endpoint's options for Runtime.install.
 *
 * With tracing on, each activity runs in a span of `@temporalio/interceptors-opentelemetry`
 * (`RunActivity:<type>`, child of the workflow's `StartActivity:<type>` through the headers), and
 * `RunAttributes` adds what the run's arguments and result say (core/span-attributes.ts). With it
 * off, the worker loads the plain workflow bundle, which makes no spans (worker/index.ts,
 * WORKFLOW_BUNDLES); the sink is still registered, and drops whatever reaches it, so a replay of a
 * traced history on either bundle has the sink its spans expect.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { trace } from '@opentelemetry/api';
import type { Context as ActivityContext } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import {
  makeWorkflowExporter,
  OpenTelemetryActivityInboundInterceptor,
  OpenTelemetryActivityOutboundInterceptor,
  type OpenTelemetryWorkflowExporter,
} from '@temporalio/interceptors-opentelemetry';
import type { MetricCounter, MetricGauge, MetricHistogram, MetricMeter, MetricTags } from '@temporalio/common';
import type {
  ActivityExecuteInput,
  ActivityInboundCallsInterceptor,
  ActivityInterceptorsFactory,
  InjectedSink,
  Next,
  Runtime,
  RuntimeOptions,
} from '@temporalio/worker';
import { histogramBuckets, METRICS, snakeCaseTags } from '../core/metrics';
import { activityArgsAttributes, activityResultAttributes, ATTR } from '../core/span-attributes';
import type { Tracing } from '../host/tracing';

/** Adds the run's facts to the activity's span (the current one: the interceptor above made it). */
class RunAttributes implements ActivityInboundCallsInterceptor {
  constructor(private readonly ctx: ActivityContext) {}

  async execute(input: ActivityExecuteInput, next: Next<ActivityInboundCallsInterceptor, 'execute'>): Promise<unknown> {
    const span = trace.getActiveSpan();
    const type = this.ctx.info.activityType;
    span?.setAttributes(activityArgsAttributes(type, input.args));
    try {
      const result = await next(input);
      span?.setAttributes(activityResultAttributes(type, result));
      return result;
    } catch (err) {
      // An infrastructure failure: its failure type (core/failures.ts), or that it was not one.
      span?.setAttribute(ATTR.errorCode, err instanceof ApplicationFailure && err.type ? err.type : 'activity_failed');
      throw err;
    }
  }
}

/**
 * Schedule-to-start of each activity attempt, from the activity's side (activities are not
 * replayed, so each attempt counts once). The SDK's meter adds `namespace`, `task_queue` (a host's
 * own queue shows which host was waited for) and `activity_type` (snake_case: see
 * `snakeCaseMetricTags`).
 */
class QueueWait implements ActivityInboundCallsInterceptor {
  constructor(private readonly ctx: ActivityContext) {}

  execute(input: ActivityExecuteInput, next: Next<ActivityInboundCallsInterceptor, 'execute'>): Promise<unknown> {
    const m = METRICS.queueWait;
    const waitedMs = Date.now() - this.ctx.info.currentAttemptScheduledTimestampMs;
    this.ctx.metricMeter.createHistogram(m.name, m.valueType, '', m.help).record(Math.max(0, waitedMs) / 1000);
    return next(input);
  }
}

export interface WorkerTelemetry {
  activity: ActivityInterceptorsFactory[];
  sinks: { exporter: InjectedSink<OpenTelemetryWorkflowExporter> };
}

/** The activity interceptors and the workflow spans' sink, for `Worker.create`. */
export function workerTelemetry(tracing: Tracing | null): WorkerTelemetry {
  const queueWait = (ctx: ActivityContext) => ({ inbound: new QueueWait(ctx) });
  if (tracing === null) {
    return { activity: [queueWait], sinks: { exporter: { export: { fn: () => undefined, callDuringReplay: false } } } };
  }
  return {
    activity: [
      queueWait,
      (ctx) => ({ inbound: new OpenTelemetryActivityInboundInterceptor(ctx), outbound: new OpenTelemetryActivityOutboundInterceptor(ctx) }),
      (ctx) => ({ inbound: new RunAttributes(ctx) }),
    ],
    sinks: { exporter: makeWorkflowExporter(tracing.processor, tracing.resource) },
  };
}

/**
 * The Temporal runtime's metrics options when the worker serves Prometheus metrics: the SDK's own
 * metrics keep its `temporal_` prefix (the community dashboards expect it) and the governance
 * metrics (core/metrics.ts) come through unprefixed as `agent_*`; counters end in `_total`,
 * durations are in seconds, and the governance histograms have buckets of their own units.
 */
export function prometheusOptions(bindAddress: string): NonNullable<NonNullable<RuntimeOptions['telemetryOptions']>['metrics']> {
  return {
    prometheus: { bindAddress, countersTotalSuffix: true, useSecondsForDurations: true, histogramBucketOverrides: histogramBuckets() },
  };
}

type Tagged = MetricCounter | MetricHistogram | MetricGauge;

/** A metric whose tags are renamed to snake_case on their way to the SDK. */
function snakeCaseMetric<M extends Tagged>(metric: M): M {
  return new Proxy(metric, {
    get(target, key, receiver) {
      if (key === 'add' || key === 'record' || key === 'set') {
        const write = Reflect.get(target, key) as (value: number, tags?: MetricTags) => void;
        return (value: number, tags?: MetricTags) => write.call(target, value, tags && snakeCaseTags(tags));
      }
      if (key === 'withTags') return (tags: MetricTags) => snakeCaseMetric(target.withTags(snakeCaseTags(tags)) as M);
      return Reflect.get(target, key, receiver) as unknown;
    },
  });
}

/** A meter whose tags, and those of every metric made from it, are snake_case. */
function snakeCaseMeter(meter: MetricMeter): MetricMeter {
  return {
    createCounter: (...args) => snakeCaseMetric(meter.createCounter(...args)),
    createHistogram: (...args) => snakeCaseMetric(meter.createHistogram(...args)),
    createGauge: (...args) => snakeCaseMetric(meter.createGauge(...args)),
    withTags: (tags) => snakeCaseMeter(meter.withTags(snakeCaseTags(tags))),
  };
}

/**
 * Makes the tags of custom metrics snake_case. The TypeScript SDK tags them `taskQueue`,
 * `workflowType`, `activityType` (its workers take the runtime's meter `withTags({ namespace,
 * taskQueue })`, workflows and activities add their type), where the SDK core's own metrics say
 * `task_queue`, `workflow_type`, `activity_type`, as Prometheus conventions and `promtool check
 * metrics` want. Replacing the runtime's meter before any worker is created is the one place all
 * of them pass; the values and the replay rule (workflows emit nothing while replaying) are the
 * SDK's, untouched.
 */
export function snakeCaseMetricTags(runtime: Runtime): void {
  Object.defineProperty(runtime, 'metricMeter', { value: snakeCaseMeter(runtime.metricMeter), configurable: true });
}

/**
 * The worker's event-loop delay as the gauge `agent_event_loop_delay_max_seconds`: each second,
 * the largest delay of that second (`monitorEventLoopDelay`, 10 ms resolution), then a fresh
 * window. Whatever runs on the loop for long (work sized by a repository, a test or a model)
 * shows here; returns the function that stops it.
 */
export function watchEventLoop(meter: MetricMeter): () => void {
  const delays = monitorEventLoopDelay({ resolution: 10 });
  delays.enable();
  const m = METRICS.eventLoopDelay;
  const gauge = meter.createGauge(m.name, m.valueType, 's', m.help);
  const timer = setInterval(() => {
    gauge.set(delays.max / 1e9);
    delays.reset();
  }, 1000);
  timer.unref();
  return () => {
    clearInterval(timer);
    delays.disable();
  };
}
