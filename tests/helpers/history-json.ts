/**
 * Workflow histories as proto JSON (the form of `temporal workflow show -o json`), for the
 * committed histories under fixtures/histories/.
 *
 * Hazard: `historyFromJSON`/`historyToJSON` of @temporalio/common 1.24.0 pair the protojson
 * functions of @temporalio/common's protobufjs with message types built by @temporalio/proto's.
 * In this install npm keeps them as two copies (protobufjs 7 from @grpc/proto-loader takes the
 * top-level slot), protojson's `instanceof Type` check fails, and both throw "type must be a Type";
 * so does `Worker.runReplayHistories` when given JSON, because it converts with the same function.
 * Resolving protojson from @temporalio/proto's own folder pairs it with the copy that built the
 * types, whatever the layout; the replay worker then receives a History object.
 */
import type { temporal } from '@temporalio/proto';
import * as proto from '@temporalio/proto';
import { patchProtobufRoot } from '@temporalio/proto/lib/patch-protobuf-root';

export type History = temporal.api.history.v1.IHistory;

interface ProtoJson {
  fromJson(type: unknown, json: unknown, options: { ignoreUnknownFields: boolean }): History | null;
  toJson(type: unknown, message: unknown): unknown;
}

const protojson: ProtoJson = require(require.resolve('protobufjs/ext/protojson', { paths: [require.resolve('@temporalio/proto')] }));
const historyType = (patchProtobufRoot(proto) as unknown as { lookupType(name: string): unknown }).lookupType('temporal.api.history.v1.History');

/** Parses proto JSON into a History object; unknown fields (a newer server's) are ignored. */
export function historyFromJSON(json: unknown): History {
  if (typeof json !== 'object' || json === null || !Array.isArray((json as { events?: unknown }).events)) {
    throw new TypeError('not a workflow history: expected an object with an array `events`');
  }
  const history = protojson.fromJson(historyType, json, { ignoreUnknownFields: true });
  if (history === null) throw new TypeError('not a workflow history');
  return history;
}

/** The proto JSON of a History, indented like `temporal workflow show -o json`. */
export function historyToJSON(history: History): string {
  return JSON.stringify(protojson.toJson(historyType, proto.temporal.api.history.v1.History.fromObject(history)), null, 2);
}
