/**
 * Every command of `npm run agent`, in the order help lists them, and the usage text made from
 * their declarations: `--help` prints it, and the README's usage block must equal `usageBlock()`
 * (tests/cli-usage.test.ts).
 */
import type { Command, OptionSpecs } from '../command';
import { approve, reject } from './approve';
import { branch, patch } from './branch';
import { cache } from './cache';
import { consoleCommand } from './console';
import { evaluate } from './eval';
import { exportReplay } from './export-replay';
import { fork } from './fork';
import { run } from './run';
import { status, trace } from './status';
import { interrupt, steer } from './steer';

export const COMMANDS: Command<OptionSpecs>[] = [
  run,
  branch,
  patch,
  approve,
  reject,
  status,
  trace,
  exportReplay,
  fork,
  evaluate,
  steer,
  interrupt,
  consoleCommand,
  cache,
] as unknown as Command<OptionSpecs>[];

export const PREFIX = 'npm run agent -- ';

export function findCommand(name: string): Command<OptionSpecs> | undefined {
  return COMMANDS.find((c) => c.name === name);
}

/** One command's usage: its lines, the continuation lines indented under the first. */
export function commandUsage(c: Command<OptionSpecs>): string {
  return c.usage.map((line, i) => (i === 0 ? `usage: ${PREFIX}${line}` : `       ${PREFIX}${line}`)).join('\n');
}

/** The usage block of the README: every usage line of every command. */
export function usageBlock(): string {
  return COMMANDS.flatMap((c) => c.usage.map((line) => `${PREFIX}${line}`)).join('\n');
}

export function help(): string {
  const lines = [`usage: ${PREFIX}<command> [options]`, '', 'commands:'];
  for (const c of COMMANDS) lines.push(`  ${c.name.padEnd(14)} ${c.summary.replace(/\n/g, `\n  ${' '.repeat(14)} `)}`);
  lines.push(
    '',
    'Each command has --help. Commands connect like the temporal CLI: TEMPORAL_ADDRESS, or the profile TEMPORAL_PROFILE',
    '(default: default) of TEMPORAL_CONFIG_FILE (default: ~/.config/temporalio/temporal.toml). With no address in either,',
    'a local Temporal dev server is started or reused (Web UI on http://localhost:8233) with state under .agent-state/ (AGENT_STATE_DIR).',
  );
  return lines.join('\n');
}
