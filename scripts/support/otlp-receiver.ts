/**
 * A local OTLP/HTTP trace receiver for the tests and the bench: a node:http server on 127.0.0.1 that takes
 * `POST /v1/traces` with a JSON body (the OTLP JSON encoding: ids in hex, times as decimal strings
 * of nanoseconds, attributes as typed key-values), decodes every span and keeps it. Anything else
 * is answered 404 or 415 and counted, so a test can assert that nothing odd arrived.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export type Value = string | number | boolean | Value[];

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string | null;
  name: string;
  kind: number;
  start: bigint;
  end: bigint;
  status: { code: number; message?: string };
  attributes: Record<string, Value>;
  /** The resource's attributes (`service.name` says which process sent it). */
  resource: Record<string, Value>;
}

type AnyValue = {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: string | number;
  doubleValue?: number;
  arrayValue?: { values?: AnyValue[] };
};
type KeyValue = { key: string; value: AnyValue };

function decodeValue(v: AnyValue): Value {
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  if (v.arrayValue !== undefined) return (v.arrayValue.values ?? []).map(decodeValue);
  throw new Error(`an attribute value of no known type: ${JSON.stringify(v)}`);
}

const decodeAttributes = (kvs: KeyValue[] | undefined): Record<string, Value> =>
  Object.fromEntries((kvs ?? []).map((kv) => [kv.key, decodeValue(kv.value)]));

const HEX = (n: number) => new RegExp(`^[0-9a-f]{${n}}$`);

/** The spans of one OTLP JSON export request; throws on a body that is not one. */
export function decodeTraces(body: unknown): ReceivedSpan[] {
  const spans: ReceivedSpan[] = [];
  for (const rs of (
    body as { resourceSpans: { resource?: { attributes?: KeyValue[] }; scopeSpans: { spans: Record<string, unknown>[] }[] }[] }
  ).resourceSpans) {
    const resource = decodeAttributes(rs.resource?.attributes);
    for (const ss of rs.scopeSpans) {
      for (const s of ss.spans) {
        const span: ReceivedSpan = {
          traceId: s.traceId as string,
          spanId: s.spanId as string,
          parentSpanId: (s.parentSpanId as string | undefined) || null,
          name: s.name as string,
          kind: s.kind as number,
          start: BigInt(s.startTimeUnixNano as string),
          end: BigInt(s.endTimeUnixNano as string),
          status: s.status as ReceivedSpan['status'],
          attributes: decodeAttributes(s.attributes as KeyValue[]),
          resource,
        };
        if (!HEX(32).test(span.traceId) || !HEX(16).test(span.spanId) || (span.parentSpanId !== null && !HEX(16).test(span.parentSpanId))) {
          throw new Error(`span ${span.name} has malformed ids`);
        }
        if (span.end < span.start) throw new Error(`span ${span.name} ends before it starts`);
        spans.push(span);
      }
    }
  }
  return spans;
}

export class OtlpReceiver {
  readonly spans: ReceivedSpan[] = [];
  /** Requests that were not a well-formed OTLP JSON trace export. */
  readonly refused: string[] = [];
  readonly requests: { headers: Record<string, string | string[] | undefined> }[] = [];
  private server: Server | null = null;
  url = '';

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        if (req.method !== 'POST' || req.url !== '/v1/traces') {
          this.refused.push(`${req.method} ${req.url}`);
          res.writeHead(404).end();
          return;
        }
        if (!String(req.headers['content-type']).startsWith('application/json')) {
          this.refused.push(`content-type ${req.headers['content-type']}`);
          res.writeHead(415).end();
          return;
        }
        try {
          this.spans.push(...decodeTraces(JSON.parse(Buffer.concat(chunks).toString('utf8'))));
          this.requests.push({ headers: req.headers });
          res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
        } catch (err) {
          this.refused.push(`malformed: ${(err as Error).message}`);
          res.writeHead(400).end();
        }
      });
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  /** The spans of one trace. */
  trace(traceId: string): ReceivedSpan[] {
    return this.spans.filter((s) => s.traceId === traceId);
  }

  async close(): Promise<void> {
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }
}
