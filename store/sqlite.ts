/** The host's SQLite files (ledger, store): durable before a call returns, and shared by processes. */
import Database from 'better-sqlite3';

/** Opens `file` in WAL mode with full fsync, and creates `schema` if it is not there yet. */
export function openDurable(file: string, schema: string): Database.Database {
  const db = new Database(file);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  db.pragma('busy_timeout = 5000');
  db.exec(schema);
  return db;
}
