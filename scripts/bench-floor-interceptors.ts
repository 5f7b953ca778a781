/**
 * The workflow interceptors of `npm run bench`'s traced floor: OpenTelemetry's from
 * `@temporalio/interceptors-opentelemetry`, with nothing of the harness's beside them, over the
 * same context manager as the traced bundle's (workflows/trace-context.ts, preloaded), so the
 * floor pays what any workflow traced this way pays and nothing the harness already removed.
 */
import * as otel from '@opentelemetry/api';
import {
  OpenTelemetryInboundInterceptor,
  OpenTelemetryInternalsInterceptor,
  OpenTelemetryOutboundInterceptor,
} from '@temporalio/interceptors-opentelemetry/lib/workflow';
import type { WorkflowInterceptors } from '@temporalio/workflow';
import { SharedContextManager } from '../workflows/trace-context';

otel.context.setGlobalContextManager(new SharedContextManager(otel.ROOT_CONTEXT));

export const interceptors = (): WorkflowInterceptors => ({
  inbound: [new OpenTelemetryInboundInterceptor()],
  outbound: [new OpenTelemetryOutboundInterceptor()],
  internals: [new OpenTelemetryInternalsInterceptor()],
});
