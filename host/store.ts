/**
 * The host store: a content-addressed SQLite file beside the ledger, outside every workspace.
 * It holds what a run's Temporal history only references: replays, decisions, validated calls,
 * tool results, the transcript (a hash chain of call/result groups) and the trace. Every row is
 * written with `synchronous = FULL` before the activity that wrote it returns, so a digest that
 * reached history always resolves here.
 *
 * Each commit costs a sync of the WAL (about a millisecond on the worker's disk): an activity
 * writes the rows of its step inside one `batch`, so it pays one sync, not one per row.
 */
import type Database from 'better-sqlite3';
import { openDurable } from './sqlite';
import { canonicalJson } from '../core/canonical';
import type { TraceEvent } from '../core/trace';
import type { TranscriptEntry } from '../core/transcript';
import { sha256 } from './digest';

export type BlobKind =
  | 'replay'
  | 'decision'
  | 'call'
  | 'result'
  | 'transcript'
  | 'model_request'
  | 'model_response'
  | 'merge'
  | 'instructions'
  | 'prompt'
  /** The whole diff of an action whose diff history carries cut (the console shows it whole). */
  | 'diff';

/** One link of a run's transcript: the entry and the digest of the link before it. */
export interface TranscriptNode {
  prev: string | null;
  entry: TranscriptEntry;
}

export class StoreError extends Error {
  override name = 'StoreError';
}

export class Store {
  private readonly db: Database.Database;
  private readonly insertBlob: Database.Statement;
  private readonly selectBlob: Database.Statement;
  private readonly hasBlob: Database.Statement;
  private readonly insertTrace: Database.Statement;

  constructor(file: string) {
    this.db = openDurable(
      file,
      `
      CREATE TABLE IF NOT EXISTS blobs (digest TEXT PRIMARY KEY, kind TEXT NOT NULL, bytes INTEGER NOT NULL, body TEXT NOT NULL);
      CREATE TABLE IF NOT EXISTS trace (run_id TEXT NOT NULL, seq INTEGER NOT NULL, event TEXT NOT NULL, PRIMARY KEY (run_id, seq));
      CREATE TABLE IF NOT EXISTS model_calls (request TEXT PRIMARY KEY, response TEXT NOT NULL REFERENCES blobs(digest));
    `,
    );
    this.insertBlob = this.db.prepare(`INSERT OR IGNORE INTO blobs VALUES (?, ?, ?, ?)`);
    this.selectBlob = this.db.prepare(`SELECT body FROM blobs WHERE digest = ?`);
    this.hasBlob = this.db.prepare(`SELECT 1 FROM blobs WHERE digest = ?`);
    this.insertTrace = this.db.prepare(`INSERT OR IGNORE INTO trace VALUES (?, ?, ?)`);
  }

  /**
   * Runs `fn` in one transaction: everything it stores is committed (and synced) once, when it
   * returns, or not at all when it throws. Nested batches join the outer one.
   */
  batch<T>(fn: () => T): T {
    return this.db.transaction(fn)();
  }

  /** Stores a JSON value under the digest of its canonical form and returns that digest. */
  put(kind: BlobKind, value: unknown): string {
    const body = canonicalJson(value);
    const digest = sha256(body);
    this.insertBlob.run(digest, kind, Buffer.byteLength(body), body);
    return digest;
  }

  /** The value stored under `digest`; a missing one is an error, never an empty value. */
  get<T = unknown>(digest: string): T {
    const row = this.selectBlob.get(digest) as { body: string } | undefined;
    if (!row) throw new StoreError(`nothing is stored under ${digest}`);
    return JSON.parse(row.body) as T;
  }

  has(digest: string): boolean {
    return this.hasBlob.get(digest) !== undefined;
  }

  /** Appends entries to the transcript whose last link is `head`; returns the new head. */
  appendTranscript(head: string | null, entries: TranscriptEntry[]): string | null {
    return this.batch(() =>
      entries.reduce<string | null>((prev, entry) => this.put('transcript', { prev, entry } satisfies TranscriptNode), head),
    );
  }

  /** The transcript ending at `head`, oldest entry first. */
  transcript(head: string | null): TranscriptEntry[] {
    const entries: TranscriptEntry[] = [];
    for (let at = head; at !== null;) {
      const node = this.get<TranscriptNode>(at);
      entries.push(node.entry);
      at = node.prev;
    }
    return entries.reverse();
  }

  /**
   * The raw response stored for a model request, or null. A retried `decide` finds the answer
   * here instead of paying the provider again.
   */
  modelResponse(requestDigest: string): { digest: string; raw: unknown } | null {
    const row = this.db.prepare(`SELECT response FROM model_calls WHERE request = ?`).get(requestDigest) as
      { response: string } | undefined;
    return row ? { digest: row.response, raw: this.get(row.response) } : null;
  }

  /** Stores a provider's raw response under its request; returns the response's digest. */
  recordModelResponse(requestDigest: string, raw: unknown): string {
    return this.batch(() => {
      const digest = this.put('model_response', raw);
      this.db.prepare(`INSERT OR IGNORE INTO model_calls VALUES (?, ?)`).run(requestDigest, digest);
      return digest;
    });
  }

  /** Records trace events; a retried append of the same events changes nothing. */
  appendTrace(runId: string, events: TraceEvent[]): void {
    this.batch(() => {
      for (const e of events) this.insertTrace.run(runId, e.seq, JSON.stringify(e));
    });
  }

  trace(runId: string): TraceEvent[] {
    const rows = this.db.prepare(`SELECT event FROM trace WHERE run_id = ? ORDER BY seq`).all(runId) as { event: string }[];
    return rows.map((r) => JSON.parse(r.event) as TraceEvent);
  }

  /** At most `limit` stored events of a run with seq above `after`, oldest first (a reader's page). */
  traceAfter(runId: string, after: number, limit: number): TraceEvent[] {
    const rows = this.db.prepare(`SELECT event FROM trace WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?`).all(runId, after, limit) as {
      event: string;
    }[];
    return rows.map((r) => JSON.parse(r.event) as TraceEvent);
  }

  close(): void {
    this.db.close();
  }
}
