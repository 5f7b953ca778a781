/**
 * The command line's one option parser, and the shape of a command. Each command declares its
 * options once, with their kinds; parsing gives typed values (a flag is a boolean, an integer
 * option a number) and a precise usage error for anything else. `--help` of each command and the
 * README's usage block are both made from these declarations (see client/commands/index.ts).
 */
import { parseArgs } from 'node:util';
import type { Session } from './session';
import type { Settings } from '../host/settings';

export class UsageError extends Error {
  override name = 'UsageError';
}

/**
 * A well-formed command whose input cannot start anything: a path that is no git repository, an
 * unknown ref, settings that do not validate. Exit status 2 with this one line, and nothing started.
 */
export class RefusedInput extends Error {
  override name = 'RefusedInput';
}

export type OptionSpec =
  | { kind: 'flag' }
  | { kind: 'string'; value: string; default?: string; choices?: readonly string[] }
  /** A whole number of at least `min` (default 1). */
  | { kind: 'int'; value: string; default?: number; min?: number }
  /** A number above zero (seconds, US dollars). */
  | { kind: 'positive'; value: string; default?: number };

export type OptionSpecs = Record<string, OptionSpec>;

type ValueOf<S extends OptionSpec> = S extends { kind: 'flag' }
  ? boolean
  : S extends { kind: 'string'; default: string }
    ? string
    : S extends { kind: 'string' }
      ? string | undefined
      : S extends { default: number }
        ? number
        : number | undefined;

export type Values<S extends OptionSpecs> = { [K in keyof S]: ValueOf<S[K]> };

export interface Command<S extends OptionSpecs = OptionSpecs> {
  name: string;
  /** One or more usage lines, each without the `npm run agent -- ` prefix. */
  usage: string[];
  summary: string;
  options: S;
  /** True when this invocation needs no Temporal connection: `runOffline` answers it, with no session. */
  offline?: (positionals: string[]) => boolean;
  /** Checks the arguments before any connection is made; throws a UsageError (or a RefusedInput). */
  check?: (positionals: string[], values: Values<S>, settings: Settings) => void | Promise<void>;
  /** Every invocation `offline` does not claim (a command has this, or `runOffline`, or both). */
  run?: (session: Session, positionals: string[], values: Values<S>) => Promise<number>;
  runOffline?: (settings: Settings, positionals: string[], values: Values<S>) => Promise<number>;
}

/** Declares a command (the identity: it lets TypeScript infer the option values). */
export function command<S extends OptionSpecs>(c: Command<S>): Command<S> {
  return c;
}

/** Parses `args` against `spec`: positionals and typed values, or a UsageError naming the fault. */
export function parseOptions<S extends OptionSpecs>(spec: S, args: string[]): { positionals: string[]; values: Values<S>; help: boolean } {
  const options: Record<string, { type: 'string' | 'boolean'; short?: string }> = { help: { type: 'boolean', short: 'h' } };
  for (const [name, o] of Object.entries(spec)) options[name] = { type: o.kind === 'flag' ? 'boolean' : 'string' };
  let parsed;
  try {
    parsed = parseArgs({ args, options, allowPositionals: true, strict: true });
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  const raw = parsed.values as Record<string, string | boolean | undefined>;
  const values: Record<string, unknown> = {};
  for (const [name, o] of Object.entries(spec)) values[name] = typed(name, o, raw[name]);
  return { positionals: parsed.positionals, values: values as Values<S>, help: raw.help === true };
}

function typed(name: string, o: OptionSpec, raw: string | boolean | undefined): unknown {
  switch (o.kind) {
    case 'flag':
      return raw === true;
    case 'string': {
      const value = (raw as string | undefined) ?? o.default;
      if (value !== undefined && o.choices && !o.choices.includes(value))
        throw new UsageError(`--${name} must be ${o.choices.join(' or ')}, got ${JSON.stringify(value)}`);
      return value;
    }
    case 'int': {
      if (raw === undefined) return o.default;
      const n = Number(raw);
      const min = o.min ?? 1;
      if (!Number.isInteger(n) || n < min || String(raw).trim() === '')
        throw new UsageError(
          `--${name} must be ${min === 1 ? 'a positive integer' : `an integer of at least ${min}`}, got ${JSON.stringify(raw)}`,
        );
      return n;
    }
    case 'positive': {
      if (raw === undefined) return o.default;
      const n = Number(raw);
      if (!(n > 0) || !Number.isFinite(n)) throw new UsageError(`--${name} must be a positive number, got ${JSON.stringify(raw)}`);
      return n;
    }
  }
}

/** `--name VALUE` as usage shows an option. */
export function optionUsage(name: string, o: OptionSpec): string {
  if (o.kind === 'flag') return `--${name}`;
  const value = o.kind === 'string' && o.choices ? o.choices.join('|') : o.value;
  return `--${name} ${value}`;
}
