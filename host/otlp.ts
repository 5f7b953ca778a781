/**
 * An OTLP/HTTP span exporter with JSON bodies: one small adapter behind OpenTelemetry's
 * `SpanExporter` interface. It posts each batch to `<endpoint>/v1/traces` as the OTLP
 * specification's JSON encoding (ids in hex, times as decimal strings of nanoseconds), which every
 * OTLP receiver accepts (the OpenTelemetry Collector, Jaeger, Tempo...).
 *
 * Written here rather than taken from `@opentelemetry/exporter-trace-otlp-http` so that nothing
 * but host/settings.ts reads the environment (that package reads a dozen OTEL_* variables itself)
 * and no protobuf, logs or metrics SDK comes along for the ride.
 *
 * Failures are real: a refused connection, a timeout or a non-2xx answer fails the export with the
 * status and the start of the receiver's answer, and is reported on stderr (at most once a minute,
 * so a receiver that is down does not flood the worker's log). Spans of a failed batch are dropped,
 * never retried forever: tracing must not hold the harness up.
 */
import type { Attributes, AttributeValue, HrTime } from '@opentelemetry/api';
import { ExportResultCode, type ExportResult } from '@opentelemetry/core';
import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace-base';

/** One export request's limit: a receiver that does not answer in time fails the batch. */
const EXPORT_TIMEOUT_MS = 10_000;
const REPORT_EVERY_MS = 60_000;

type AnyValue =
  | { stringValue: string }
  | { boolValue: boolean }
  | { intValue: string }
  | { doubleValue: number }
  | { arrayValue: { values: AnyValue[] } };
type KeyValue = { key: string; value: AnyValue };

type Primitive = string | number | boolean;
const primitive = (v: unknown): v is Primitive =>
  typeof v === 'string' || typeof v === 'boolean' || (typeof v === 'number' && Number.isFinite(v));

/** An attribute's OTLP value; null for what an attribute cannot hold. */
function anyValue(v: unknown): AnyValue | null {
  if (Array.isArray(v)) return v.every(primitive) ? { arrayValue: { values: v.map((x) => anyValue(x)!) } } : null;
  if (typeof v === 'boolean') return { boolValue: v };
  if (typeof v === 'number') return !Number.isFinite(v) ? null : Number.isInteger(v) ? { intValue: String(v) } : { doubleValue: v };
  if (typeof v === 'string') return { stringValue: v };
  return null;
}

/**
 * Attributes as OTLP key-values. The SDK's workflow span sink copies the whole workflow info onto
 * each workflow span, objects included; only the values an attribute can hold are kept.
 */
const keyValues = (attributes: Attributes): KeyValue[] =>
  Object.entries(attributes).flatMap(([key, value]) => {
    const v = anyValue(value as AttributeValue | undefined);
    return v === null ? [] : [{ key, value: v }];
  });

const nanos = ([s, ns]: HrTime) => (BigInt(s) * 1_000_000_000n + BigInt(ns)).toString();

/** The OTLP JSON body of one batch: spans grouped by resource, then by instrumentation scope. */
export function otlpJson(spans: ReadableSpan[]): unknown {
  const byResource = new Map<ReadableSpan['resource'], Map<string, ReadableSpan[]>>();
  for (const span of spans) {
    const scopes = byResource.get(span.resource) ?? new Map<string, ReadableSpan[]>();
    byResource.set(span.resource, scopes);
    const scope = `${span.instrumentationLibrary.name}\0${span.instrumentationLibrary.version ?? ''}`;
    scopes.set(scope, [...(scopes.get(scope) ?? []), span]);
  }
  return {
    resourceSpans: [...byResource.entries()].map(([resource, scopes]) => ({
      resource: { attributes: keyValues(resource.attributes) },
      scopeSpans: [...scopes.values()].map((group) => ({
        scope: { name: group[0].instrumentationLibrary.name, version: group[0].instrumentationLibrary.version ?? '' },
        spans: group.map((s) => ({
          traceId: s.spanContext().traceId,
          spanId: s.spanContext().spanId,
          ...(s.parentSpanId ? { parentSpanId: s.parentSpanId } : {}),
          name: s.name,
          // OTLP numbers the kinds from 1 (0 is "unspecified"); the API from 0.
          kind: s.kind + 1,
          startTimeUnixNano: nanos(s.startTime),
          endTimeUnixNano: nanos(s.endTime),
          attributes: keyValues(s.attributes),
          droppedAttributesCount: s.droppedAttributesCount,
          events: s.events.map((e) => ({ timeUnixNano: nanos(e.time), name: e.name, attributes: keyValues(e.attributes ?? {}) })),
          links: s.links.map((l) => ({ traceId: l.context.traceId, spanId: l.context.spanId, attributes: keyValues(l.attributes ?? {}) })),
          status: { code: s.status.code, ...(s.status.message ? { message: s.status.message } : {}) },
        })),
      })),
    })),
  };
}

export class OtlpHttpExporter implements SpanExporter {
  private readonly url: string;
  private readonly pending = new Set<Promise<void>>();
  private lastReport = -Infinity;
  private stopped = false;

  constructor(
    endpoint: string,
    private readonly headers: Record<string, string> = {},
    private readonly report: (message: string) => void = (m) => process.stderr.write(`${m}\n`),
  ) {
    this.url = `${endpoint.replace(/\/+$/, '')}/v1/traces`;
  }

  export(spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    if (this.stopped) return done({ code: ExportResultCode.FAILED, error: new Error('the exporter is shut down') });
    const sent = this.send(JSON.stringify(otlpJson(spans))).then(
      () => done({ code: ExportResultCode.SUCCESS }),
      (err: Error) => {
        const now = performance.now();
        if (now - this.lastReport >= REPORT_EVERY_MS) {
          this.lastReport = now;
          this.report(`traces: ${spans.length} spans not exported to ${this.url}: ${err.message}`);
        }
        done({ code: ExportResultCode.FAILED, error: err });
      },
    );
    this.pending.add(sent);
    void sent.finally(() => this.pending.delete(sent));
  }

  private async send(body: string): Promise<void> {
    const response = await fetch(this.url, {
      method: 'POST',
      headers: { ...this.headers, 'content-type': 'application/json' },
      body,
      signal: AbortSignal.timeout(EXPORT_TIMEOUT_MS),
    }).catch((err: Error) => {
      const cause = (err as { cause?: { code?: string; message?: string } }).cause;
      throw new Error(cause?.code ?? cause?.message ?? err.message);
    });
    if (!response.ok) {
      const text = (await response.text().catch(() => '')).slice(0, 200);
      throw new Error(`HTTP ${response.status}${text ? `: ${text}` : ''}`);
    }
    await response.arrayBuffer();
  }

  /** Waits for the requests in flight. */
  async forceFlush(): Promise<void> {
    await Promise.all([...this.pending]);
  }

  async shutdown(): Promise<void> {
    this.stopped = true;
    await this.forceFlush();
  }
}
