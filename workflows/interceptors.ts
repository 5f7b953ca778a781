/**
 * The workflow interceptors of the traced bundle (worker/index.ts, `workflowBundleOptions`):
 * OpenTelemetry's, from `@temporalio/interceptors-opentelemetry`, and ours beside them. A worker
 * that exports no traces loads the plain bundle, without this module or any OpenTelemetry code.
 *
 * Determinism: spans are made inside the workflow sandbox, with its deterministic clock and
 * random numbers, and add no command; they leave through the `exporter` sink, which the SDK does
 * not call while replaying, so a replayed run exports nothing twice. The SDK flags of those
 * interceptors (recorded in history) keep old histories replaying as they were recorded.
 *
 * One trace per run: the client's start span (when the command line traces) or the workflow's own
 * root span begins it; the headers carry it to each activity and across continue-as-new, and to
 * the runs of a run's tasks. A batch's runs each begin a trace of their own (the parent's header is
 * not passed on), so one run's trace id finds that run alone.
 */
import * as otel from '@opentelemetry/api';
import { TRACE_HEADER } from '@temporalio/interceptors-opentelemetry/lib/instrumentation';
import {
  OpenTelemetryInboundInterceptor,
  OpenTelemetryInternalsInterceptor,
  OpenTelemetryOutboundInterceptor,
} from '@temporalio/interceptors-opentelemetry/lib/workflow';
import * as wf from '@temporalio/workflow';
import type {
  ActivityInput,
  LocalActivityInput,
  Next,
  QueryInput,
  StartChildWorkflowExecutionInput,
  WorkflowExecuteInput,
  WorkflowInboundCallsInterceptor,
  WorkflowInterceptors,
  WorkflowOutboundCallsInterceptor,
} from '@temporalio/workflow';
import type { RunRecord } from '../core/contracts';
import { activityArgsAttributes, ATTR, runAttributes } from '../core/span-attributes';
import { AGENT_EVAL, AGENT_RUN } from './messages';
import { SharedContextManager } from './trace-context';

// Each workflow's OpenTelemetry API keeps the first context manager registered: ours, over the
// thread's one storage, registered as this module loads, before the interceptors below make theirs.
otel.context.setGlobalContextManager(new SharedContextManager(otel.ROOT_CONTEXT));

/** OpenTelemetry's, less the span of each Query: runs are queried every second by whoever follows them. */
class Inbound extends OpenTelemetryInboundInterceptor {
  override handleQuery(input: QueryInput, next: Next<WorkflowInboundCallsInterceptor, 'handleQuery'>): Promise<unknown> {
    return next(input);
  }
}

/**
 * Inside OpenTelemetry's: the span it made is the current one. The run's span gets the workflow id
 * at once and the record's facts at the end; an activity's start span what its arguments say.
 */
class RunSpans implements WorkflowInboundCallsInterceptor, WorkflowOutboundCallsInterceptor {
  async execute(input: WorkflowExecuteInput, next: Next<WorkflowInboundCallsInterceptor, 'execute'>): Promise<unknown> {
    const span = otel.trace.getActiveSpan();
    span?.setAttribute(ATTR.workflowId, wf.workflowInfo().workflowId);
    const result = await next(input);
    const record = (result as { record?: RunRecord } | undefined)?.record;
    if (wf.workflowInfo().workflowType === AGENT_RUN && record !== undefined) span?.setAttributes(runAttributes(record));
    return result;
  }

  scheduleActivity(input: ActivityInput, next: Next<WorkflowOutboundCallsInterceptor, 'scheduleActivity'>): Promise<unknown> {
    otel.trace.getActiveSpan()?.setAttributes(activityArgsAttributes(input.activityType, input.args));
    return next(input);
  }

  scheduleLocalActivity(
    input: LocalActivityInput,
    next: Next<WorkflowOutboundCallsInterceptor, 'scheduleLocalActivity'>,
  ): Promise<unknown> {
    otel.trace.getActiveSpan()?.setAttributes(activityArgsAttributes(input.activityType, input.args));
    return next(input);
  }

  startChildWorkflowExecution(
    input: StartChildWorkflowExecutionInput,
    next: Next<WorkflowOutboundCallsInterceptor, 'startChildWorkflowExecution'>,
  ): Promise<[Promise<string>, Promise<unknown>]> {
    if (wf.workflowInfo().workflowType !== AGENT_EVAL) return next(input);
    const { [TRACE_HEADER]: _parent, ...headers } = input.headers;
    return next({ ...input, headers });
  }
}

export const interceptors = (): WorkflowInterceptors => {
  const ours = new RunSpans();
  return {
    inbound: [new Inbound(), ours],
    outbound: [new OpenTelemetryOutboundInterceptor(), ours],
    internals: [new OpenTelemetryInternalsInterceptor()],
  };
};
