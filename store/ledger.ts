/**
 * The host ledger: a SQLite file outside every workspace. For each write it holds the intent
 * (recorded before the file is touched) and the receipt (recorded after the rename). Recovery
 * reads both to tell "not written", "written but not recorded" and "something else" apart.
 * An attempt that could not write (no space left) says so in `not_written`, with its reason; the
 * target is then as before, and a later attempt writes it or the run ends saying it was not.
 * A ledger that finds no space left throws a DiskFullError (host/disk.ts): nothing of that row
 * is recorded.
 */
import { join } from 'node:path';
import type Database from 'better-sqlite3';
import { openDurable } from './sqlite';
import { onDisk } from '../host/disk';
import type { PendingAction } from '../core/contracts';

export interface Receipt {
  action_id: string;
  run_id: string;
  path: string;
  before: string;
  after: string;
  /** True when the receipt was recorded by recovery for a write that had already happened. */
  recovered: boolean;
}

/** An attempt of a write that did not write, and why (`disk_full`, with what was full). */
export interface NotWritten {
  action_id: string;
  reason: 'disk_full';
  detail: string;
}

export class Ledger {
  private readonly db: Database.Database;

  constructor(file: string) {
    this.db = openDurable(
      file,
      `
      CREATE TABLE IF NOT EXISTS intents (
        action_id TEXT PRIMARY KEY, run_id TEXT NOT NULL, path TEXT NOT NULL,
        before TEXT NOT NULL, after TEXT NOT NULL, args_digest TEXT NOT NULL, workspace_digest TEXT NOT NULL);
      CREATE TABLE IF NOT EXISTS receipts (
        action_id TEXT PRIMARY KEY REFERENCES intents(action_id), run_id TEXT NOT NULL, path TEXT NOT NULL,
        before TEXT NOT NULL, after TEXT NOT NULL, recovered INTEGER NOT NULL);
      CREATE TABLE IF NOT EXISTS not_written (
        action_id TEXT NOT NULL REFERENCES intents(action_id), run_id TEXT NOT NULL, reason TEXT NOT NULL, detail TEXT NOT NULL);
    `,
    );
  }

  recordIntent(runId: string, action: PendingAction): void {
    this.write(() =>
      this.db
        .prepare(`INSERT OR IGNORE INTO intents VALUES (?, ?, ?, ?, ?, ?, ?)`)
        .run(action.action_id, runId, action.path, action.before, action.after, action.args_digest, action.workspace_digest),
    );
  }

  hasIntent(actionId: string): boolean {
    return this.db.prepare(`SELECT 1 FROM intents WHERE action_id = ?`).get(actionId) !== undefined;
  }

  recordReceipt(receipt: Receipt): void {
    this.write(() =>
      this.db
        .prepare(`INSERT OR IGNORE INTO receipts VALUES (?, ?, ?, ?, ?, ?)`)
        .run(receipt.action_id, receipt.run_id, receipt.path, receipt.before, receipt.after, receipt.recovered ? 1 : 0),
    );
  }

  /** An attempt of an action whose intent is recorded did not write its target (which is as before): one row per attempt. */
  recordNotWritten(runId: string, row: NotWritten): void {
    this.write(() => this.db.prepare(`INSERT INTO not_written VALUES (?, ?, ?, ?)`).run(row.action_id, runId, row.reason, row.detail));
  }

  /** The attempts of an action that did not write, oldest first. */
  notWritten(actionId: string): NotWritten[] {
    return this.db
      .prepare(`SELECT action_id, reason, detail FROM not_written WHERE action_id = ? ORDER BY rowid`)
      .all(actionId) as NotWritten[];
  }

  receipt(actionId: string): Receipt | null {
    const row = this.db.prepare(`SELECT * FROM receipts WHERE action_id = ?`).get(actionId) as
      (Omit<Receipt, 'recovered'> & { recovered: number }) | undefined;
    return row ? { ...row, recovered: row.recovered === 1 } : null;
  }

  receipts(runId: string): Receipt[] {
    const rows = this.db.prepare(`SELECT * FROM receipts WHERE run_id = ? ORDER BY rowid`).all(runId) as (Omit<Receipt, 'recovered'> & {
      recovered: number;
    })[];
    return rows.map((r) => ({ ...r, recovered: r.recovered === 1 }));
  }

  /** Number of ledger rows (intents and receipts) a run has; zero for a run that never wrote. */
  entries(runId: string): number {
    const q = (table: string) => (this.db.prepare(`SELECT COUNT(*) AS n FROM ${table} WHERE run_id = ?`).get(runId) as { n: number }).n;
    return q('intents') + q('receipts');
  }

  close(): void {
    this.db.close();
  }

  private write(fn: () => unknown): void {
    onDisk('state folder', 'the ledger', fn);
  }
}

/** The ledger's file in a state folder. */
export const LEDGER_FILE = 'ledger.sqlite';

/** The ledger of a state folder, made when it is not there yet: the worker's, which writes it. */
export function hostLedger(stateDir: string): Ledger {
  return new Ledger(join(stateDir, LEDGER_FILE));
}
