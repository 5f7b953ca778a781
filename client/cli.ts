#!/usr/bin/env node
/**
 * `npm run agent -- <command>` (or the package's `coding-agent` bin): the one entry point
 * (SPEC section 8). Each command lives in client/commands/; this file parses, dispatches, and
 * turns usage errors and connection faults (host/connection.ts) into exit status 2.
 */
import { parseOptions, RefusedInput, UsageError } from './command';
import { commandUsage, findCommand, help } from './commands';
import type { Session } from './session';
import { readSettings, type Settings } from '../host/settings';

const out = (text: string) => process.stdout.write(`${text}\n`);

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    out(help());
    return name ? 0 : 2;
  }
  const command = findCommand(name);
  if (!command) {
    process.stderr.write(`unknown command ${JSON.stringify(name)}\n${help()}\n`);
    return 2;
  }
  const usageError = (err: unknown) => {
    process.stderr.write(`${(err as Error).message}\n${commandUsage(command)}\n`);
    return 2;
  };
  const refused = (err: RefusedInput) => {
    process.stderr.write(`${err.message}\n`);
    return 2;
  };
  let parsed;
  let settings: Settings;
  try {
    parsed = parseOptions(command.options, rest);
    if (parsed.help) {
      out(`${commandUsage(command)}\n\n${command.summary}`);
      return 0;
    }
    // The one reading of this process's settings: a malformed variable is named, and nothing starts.
    settings = readSettings();
    await command.check?.(parsed.positionals, parsed.values, settings);
  } catch (err) {
    if (err instanceof UsageError) return usageError(err);
    if (err instanceof RefusedInput) return refused(err);
    throw err;
  }
  const { run, runOffline } = command;
  if (runOffline && (command.offline?.(parsed.positionals) || !run))
    return runCommand(() => runOffline(settings, parsed.positionals, parsed.values));
  if (!run) throw new Error(`${command.name} has nothing to run`);
  // Loaded here, not at the top: help and usage errors answer without loading the Temporal SDK.
  let session: Session;
  try {
    session = await (await import('./session')).openSession(settings);
  } catch (err) {
    // A profile, certificate or address that does not work: one line saying which (never the key).
    const { ConnectionError } = await import('../host/connection');
    if (!(err instanceof ConnectionError)) throw err;
    process.stderr.write(`error: ${err.message}\n`);
    return 2;
  }
  try {
    return await runCommand(() => run(session, parsed.positionals, parsed.values));
  } finally {
    await session.close();
  }

  async function runCommand(run: () => Promise<number>): Promise<number> {
    try {
      return await run();
    } catch (err) {
      if (err instanceof UsageError) return usageError(err);
      if (err instanceof RefusedInput) return refused(err);
      throw err;
    }
  }
}

/**
 * Exits once everything written has left: a pipe to a slow reader (a pager, a test) holds what
 * `process.exit` would otherwise drop, such as the last lines a followed run printed.
 */
function exitAfterOutput(code: number): void {
  let pending = 2;
  const done = () => {
    if (--pending === 0) process.exit(code);
  };
  process.stdout.write('', done);
  process.stderr.write('', done);
}

main(process.argv.slice(2)).then(exitAfterOutput, (err) => {
  process.stderr.write(`error: ${err instanceof Error ? err.message : String(err)}\n`);
  exitAfterOutput(1);
});
