/**
 * OpenTelemetry tracing of one process (the worker, or a command of the command line), on when
 * `OTEL_EXPORTER_OTLP_ENDPOINT` is set and absent otherwise: no provider, no exporter, nothing
 * sent, and the Temporal interceptors that need it are not installed (the worker loads the
 * workflow bundle without them: worker/index.ts, WORKFLOW_BUNDLES).
 *
 * When on, a tracer provider is registered globally, as the interceptors of
 * `@temporalio/interceptors-opentelemetry` expect: W3C trace context in the headers Temporal
 * carries, async-hooks context so a span is current across awaits, every span sampled, batches
 * exported over OTLP/HTTP (host/otlp.ts). `shutdown()` exports what is left; entry points call it
 * in their `finally`.
 */
import { context, isSpanContextValid, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { Resource } from '@opentelemetry/resources';
import { AlwaysOnSampler, BasicTracerProvider, BatchSpanProcessor, type SpanProcessor } from '@opentelemetry/sdk-trace-base';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { OtlpHttpExporter } from './otlp';
import { PROJECT_ROOT, type Settings } from './settings';

export interface Tracing {
  /** Where ended spans go (the workflow spans' sink feeds it too). */
  processor: SpanProcessor;
  resource: Resource;
  /** Exports the spans not exported yet and unregisters the provider. */
  shutdown(): Promise<void>;
}

/** Spans wait at most this long before they are exported. */
const EXPORT_DELAY_MS = 2000;

let version: string | null = null;
let active = false;
const packageVersion = () =>
  (version ??= (JSON.parse(readFileSync(join(PROJECT_ROOT, 'package.json'), 'utf8')) as { version: string }).version);

/**
 * Starts tracing for this process when the settings name a receiver; null otherwise. One per
 * process: a second call while one is on fails (the provider is global).
 */
export function startTracing(
  settings: Pick<Settings, 'otlpEndpoint' | 'otlpHeaders'>,
  service: 'coding-agent-worker' | 'coding-agent-cli',
): Tracing | null {
  if (settings.otlpEndpoint === null) return null;
  if (active) throw new Error('tracing is already set up in this process');
  active = true;
  const resource = new Resource({ 'service.name': service, 'service.version': packageVersion(), 'process.pid': process.pid });
  const processor = new BatchSpanProcessor(new OtlpHttpExporter(settings.otlpEndpoint, settings.otlpHeaders), {
    scheduledDelayMillis: EXPORT_DELAY_MS,
  });
  const provider = new BasicTracerProvider({
    resource,
    mergeResourceWithDefaults: false,
    sampler: new AlwaysOnSampler(),
    spanProcessors: [processor],
  });
  provider.register({ contextManager: new AsyncLocalStorageContextManager().enable(), propagator: new W3CTraceContextPropagator() });
  return {
    processor,
    resource,
    async shutdown() {
      await provider.shutdown();
      trace.disable();
      context.disable();
      propagation.disable();
      active = false;
    },
  };
}

/** The trace id of the span current here (an activity's own, under the worker's interceptors), or null. */
export function activeTraceId(): string | null {
  const current = trace.getActiveSpan()?.spanContext();
  return current !== undefined && isSpanContextValid(current) ? current.traceId : null;
}
