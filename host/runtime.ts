/**
 * The Temporal runtime of every process of the project, and its logger: the SDK's logs and its
 * Rust core's, forwarded to one logger that writes plain lines to stderr, minus the one warning
 * that every host-queue worker gives by design ("No workflows registered" for
 * `<taskQueue>@<hostId>`, which only carries activities).
 *
 * Hazard: without `telemetryOptions.logging.forward`, the core prints its own lines, with colour
 * codes, to stdout, whatever the logger: a retried call under load then lands inside the one JSON
 * document `--json` prints there.
 */
import { DefaultLogger, Runtime, type LogEntry, type LogLevel, type RuntimeOptions } from '@temporalio/worker';

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

type Telemetry = Omit<NonNullable<RuntimeOptions['telemetryOptions']>, 'logging'>;

/** The runtime's options: logs at `level` and above, the core's forwarded to the same logger. */
export function runtimeOptions(level: LogLevel = 'WARN', telemetry: Telemetry = {}): RuntimeOptions {
  return {
    logger: runtimeLogger(level),
    telemetryOptions: { ...telemetry, logging: { forward: {}, filter: { core: level, other: 'ERROR' } } },
  };
}

/** Installs the process's runtime (once per process, before any connection or worker). */
export function installRuntime(level: LogLevel = 'WARN', telemetry: Telemetry = {}): Runtime {
  return Runtime.install(runtimeOptions(level, telemetry));
}
