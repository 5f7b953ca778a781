/**
 * The host store: a content-addressed SQLite file beside the ledger, outside every workspace.
 * It holds what a run's Temporal history only references: replays, decisions, validated calls,
 * tool results, the transcript (a hash chain of call/result groups) and the trace. Every row is
 * written with `synchronous = FULL` before the activity that wrote it returns, so a digest that
 * reached history always resolves here.
 *
 * A commit that finds no space left is rolled back whole and thrown as a DiskFullError (host/disk.ts).
 *
 * Each commit costs a sync of the WAL (about a millisecond on the worker's disk): an activity
 * writes the rows of its step inside one `batch`, so it pays one sync, not one per row.
 *
 * Two tables are not content-addressed JSON:
 * - `fragments`: a live reply's text as it streams, by run, turn and index (`appendFragment`,
 *   `fragmentsAfter`; their writer and reader are fragments.ts). They may be lost (a worker killed
 *   mid-reply keeps what it flushed); the turn's authoritative text is the stored response and the
 *   decisions made from it. A fragment's index is its n (from 1, fragments.ts); the table's `idx`
 *   column holds n - 1, as every build has written it, so the rows of any build read alike.
 * - `contents`: the bytes each receipted write put into the workspace, under their SHA-256 (the
 *   ledger's `after`), kept before the write's intent is recorded, so every receipt's content is
 *   here; a fork rebuilds a workspace from the baseline and these.
 * - `baselines`: the candidate tests' outcomes at a base tree, by a key of the tree, the command,
 *   the backend and image and the test patch (sandbox/baseline.ts), so the runs of one base pay once.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type Database from 'better-sqlite3';
import { openDurable } from './sqlite';
import { onDisk } from '../host/disk';
import { canonicalJson } from '../core/canonical';
import type { TraceEvent } from '../core/trace';
import type { TranscriptEntry } from '../core/transcript';
import { sha256 } from '../host/digest';

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
  | 'diff'
  /** A fork's plan (workspace/fork-plan.ts): what its workspace is restored from. */
  | 'fork'
  /** Every test of one test run with its outcome (sandbox/junit.ts). */
  | 'tests'
  /** A task's own FAIL_TO_PASS and PASS_TO_PASS ids, and its test patch (a JSON string). */
  | 'verdict';

/** Text of a live reply as it streamed: the `index`-th fragment of `turn` (1, 2, ...), from request `stream` of that turn (1, 2, ...). */
export interface Fragment {
  turn: number;
  /** Its n within the turn, from 1 over every stream of the turn (fragments.ts). */
  index: number;
  /** Each request of a turn that streamed text (a retry, a request asked again) is a new stream. */
  stream: number;
  text: string;
}

/** Fragments a reader gets at most per call. */
export const FRAGMENTS_PAGE = 500;

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
  /** One transaction wrapper for every batch (better-sqlite3 builds one per call of `transaction`). */
  private readonly inTransaction: <T>(fn: () => T) => T;

  constructor(file: string) {
    this.db = openDurable(
      file,
      `
      CREATE TABLE IF NOT EXISTS blobs (digest TEXT PRIMARY KEY, kind TEXT NOT NULL, bytes INTEGER NOT NULL, body TEXT NOT NULL);
      CREATE TABLE IF NOT EXISTS trace (run_id TEXT NOT NULL, seq INTEGER NOT NULL, event TEXT NOT NULL, PRIMARY KEY (run_id, seq));
      CREATE TABLE IF NOT EXISTS model_calls (request TEXT PRIMARY KEY, response TEXT NOT NULL REFERENCES blobs(digest));
      CREATE TABLE IF NOT EXISTS fragments (run_id TEXT NOT NULL, turn INTEGER NOT NULL, idx INTEGER NOT NULL, stream INTEGER NOT NULL,
        text TEXT NOT NULL, PRIMARY KEY (run_id, turn, idx));
      CREATE TABLE IF NOT EXISTS contents (digest TEXT PRIMARY KEY, body BLOB NOT NULL);
      CREATE TABLE IF NOT EXISTS baselines (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    `,
    );
    this.insertBlob = this.db.prepare(`INSERT OR IGNORE INTO blobs VALUES (?, ?, ?, ?)`);
    this.selectBlob = this.db.prepare(`SELECT body FROM blobs WHERE digest = ?`);
    this.hasBlob = this.db.prepare(`SELECT 1 FROM blobs WHERE digest = ?`);
    this.insertTrace = this.db.prepare(`INSERT OR IGNORE INTO trace VALUES (?, ?, ?)`);
    this.inTransaction = this.db.transaction(<T>(fn: () => T): T => fn()) as <T>(fn: () => T) => T;
  }

  /**
   * Runs `fn` in one transaction: everything it stores is committed (and synced) once, when it
   * returns, or not at all when it throws. Nested batches join the outer one.
   */
  batch<T>(fn: () => T): T {
    return onDisk('state folder', 'the host store', () => this.inTransaction(fn));
  }

  /** Stores a JSON value under the digest of its canonical form and returns that digest. */
  put(kind: BlobKind, value: unknown): string {
    const body = canonicalJson(value);
    const digest = sha256(body);
    onDisk('state folder', 'the host store', () => this.insertBlob.run(digest, kind, Buffer.byteLength(body), body));
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

  /** The digests of the transcript's links ending at `head`, oldest first (a missing link is a StoreError). */
  transcriptLinks(head: string | null): string[] {
    const links: string[] = [];
    for (let at = head; at !== null; at = this.get<TranscriptNode>(at).prev) links.push(at);
    return links.reverse();
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

  /** The number the next stream of fragments of a run's turn takes (1 for the first). */
  nextFragmentStream(runId: string, turn: number): number {
    const row = this.db.prepare(`SELECT MAX(stream) AS s FROM fragments WHERE run_id = ? AND turn = ?`).get(runId, turn) as {
      s: number | null;
    };
    return (row.s ?? 0) + 1;
  }

  /** Appends a fragment of `stream` to the run's turn; returns its index (1, 2, ... over every stream of the turn). */
  appendFragment(runId: string, turn: number, stream: number, text: string): number {
    return this.batch(() => {
      const row = this.db.prepare(`SELECT MAX(idx) + 1 AS last FROM fragments WHERE run_id = ? AND turn = ?`).get(runId, turn) as {
        last: number | null;
      };
      const index = (row.last ?? 0) + 1;
      this.db.prepare(`INSERT INTO fragments VALUES (?, ?, ?, ?, ?)`).run(runId, turn, index - 1, stream, text);
      return index;
    });
  }

  /**
   * A run's fragments after the cursor `after` (a turn and an index of it, 0 before its first;
   * null: from the start), in order of turn and index, at most `limit`. A reader passes the last
   * one it got as the next cursor.
   */
  fragmentsAfter(runId: string, after: { turn: number; index: number } | null, limit = FRAGMENTS_PAGE): Fragment[] {
    const at = after ?? { turn: -1, index: 0 };
    // `idx` holds n - 1: the fragments after n are those from idx n on.
    return this.db
      .prepare(
        `SELECT turn, idx + 1 AS "index", stream, text FROM fragments
         WHERE run_id = ? AND (turn > ? OR (turn = ? AND idx >= ?)) ORDER BY turn, idx LIMIT ?`,
      )
      .all(runId, at.turn, at.turn, at.index, limit) as Fragment[];
  }

  /** Keeps bytes written to a workspace under their SHA-256, which it returns. */
  putContent(bytes: Buffer): string {
    const digest = sha256(bytes);
    onDisk('state folder', 'the host store', () => this.db.prepare(`INSERT OR IGNORE INTO contents VALUES (?, ?)`).run(digest, bytes));
    return digest;
  }

  /** The bytes kept under `digest`, or null when this store does not hold them. */
  content(digest: string): Buffer | null {
    const row = this.db.prepare(`SELECT body FROM contents WHERE digest = ?`).get(digest) as { body: Buffer } | undefined;
    return row ? row.body : null;
  }

  /** The outcomes kept under a base's key (sandbox/baseline.ts), or null. */
  baseline<T>(key: string): T | null {
    const row = this.db.prepare(`SELECT value FROM baselines WHERE key = ?`).get(key) as { value: string } | undefined;
    return row ? (JSON.parse(row.value) as T) : null;
  }

  /** Keeps a base's outcomes under its key; the first kept stays (the same tests of the same tree). */
  keepBaseline(key: string, value: unknown): void {
    onDisk('state folder', 'the host store', () =>
      this.db.prepare(`INSERT OR IGNORE INTO baselines VALUES (?, ?)`).run(key, canonicalJson(value)),
    );
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

/** The host store's file in a state folder. */
export const STORE_FILE = 'store.sqlite';

/** The host store of a state folder, made when it is not there yet: the worker's, which writes it. */
export function hostStore(stateDir: string): Store {
  return new Store(join(stateDir, STORE_FILE));
}

/**
 * The host store of a state folder for a reader (the command line, the console), or null when the
 * folder holds none: its worker runs on another host or with another state folder, or has not
 * written yet. The one way the client opens the store; the caller closes it.
 */
export function openStore(stateDir: string): Store | null {
  const file = join(stateDir, STORE_FILE);
  return existsSync(file) ? new Store(file) : null;
}
