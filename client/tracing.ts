/**
 * The command line's client interceptor when tracing is on (host/tracing.ts): OpenTelemetry's,
 * whose start span begins a run's trace and whose headers carry it into the workflow; signals,
 * cancellations and terminations get spans too. Queries and describes do not: `run --wait`, `eval`
 * and the console ask several times a second, and a trace each would bury the runs' traces.
 */
import type {
  DescribeWorkflowExecutionResponse,
  Next,
  WorkflowClientInterceptor,
  WorkflowDescribeInput,
  WorkflowQueryInput,
} from '@temporalio/client';
import { OpenTelemetryWorkflowClientInterceptor } from '@temporalio/interceptors-opentelemetry/lib/client';

export class TracingClientInterceptor extends OpenTelemetryWorkflowClientInterceptor {
  override query(input: WorkflowQueryInput, next: Next<WorkflowClientInterceptor, 'query'>): Promise<unknown> {
    return next(input);
  }

  override describe(
    input: WorkflowDescribeInput,
    next: Next<WorkflowClientInterceptor, 'describe'>,
  ): Promise<DescribeWorkflowExecutionResponse> {
    return next(input);
  }
}
