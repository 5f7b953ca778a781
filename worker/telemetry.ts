/**
 * The worker's share of traces and metrics: the activity interceptors and the sink the workflow
 * interceptors export their spans through (workflows/tracing.ts is the workflow side).
 *
 * With tracing on, each activity runs in a span of `@temporalio/interceptors-opentelemetry`
 * (`RunActivity:<type>`, child of the workflow's `StartActivity:<type>` through the headers), and
 * `RunAttributes` adds what the run's arguments and result say (core/span-attributes.ts). With it
 * off, the workflow spans (made in the bundle either way, deterministically) are dropped at the
 * sink: no processor, no exporter.
 */
import { trace } from '@opentelemetry/api';
import type { Context as ActivityContext } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { makeWorkflowExporter, OpenTelemetryActivityInboundInterceptor, OpenTelemetryActivityOutboundInterceptor, type OpenTelemetryWorkflowExporter } from '@temporalio/interceptors-opentelemetry';
import type { ActivityExecuteInput, ActivityInboundCallsInterceptor, ActivityInterceptorsFactory, InjectedSink, Next } from '@temporalio/worker';
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

export interface WorkerTelemetry {
  activity: ActivityInterceptorsFactory[];
  sinks: { exporter: InjectedSink<OpenTelemetryWorkflowExporter> };
}

/** The activity interceptors and the workflow spans' sink, for `Worker.create`. */
export function workerTelemetry(tracing: Tracing | null): WorkerTelemetry {
  if (tracing === null) {
    return { activity: [], sinks: { exporter: { export: { fn: () => undefined, callDuringReplay: false } } } };
  }
  return {
    activity: [
      (ctx) => ({ inbound: new OpenTelemetryActivityInboundInterceptor(ctx), outbound: new OpenTelemetryActivityOutboundInterceptor(ctx) }),
      (ctx) => ({ inbound: new RunAttributes(ctx) }),
    ],
    sinks: { exporter: makeWorkflowExporter(tracing.processor, tracing.resource) },
  };
}
