/**
 * The Temporal runtime's logger for this project: the SDK's default at a level, minus the one
 * warning that every host-queue worker gives by design ("No workflows registered" for
 * `<taskQueue>@<hostId>`, which only carries activities).
 */
import { DefaultLogger, type LogEntry, type LogLevel } from '@temporalio/worker';

function expected(entry: LogEntry): boolean {
  const queue = entry.meta?.taskQueue;
  return entry.message.startsWith('No workflows registered') && typeof queue === 'string' && queue.includes('@');
}

export function runtimeLogger(level: LogLevel = 'WARN'): DefaultLogger {
  return new DefaultLogger(level, (entry) => {
    if (expected(entry)) return;
    const at = new Date(Number(entry.timestampNanos / 1_000_000n)).toISOString();
    process.stderr.write(`${at} [${entry.level}] ${entry.message}${entry.meta === undefined ? '' : ` ${JSON.stringify(entry.meta)}`}\n`);
  });
}
