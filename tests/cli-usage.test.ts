/** The command line's usage text is made from the commands' own declarations, and the README shows exactly it. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseOptions, UsageError } from '../client/command';
import { COMMANDS, usageBlock } from '../client/commands';
import { PROJECT_ROOT } from './helpers/run-dir';

describe('the command line usage', () => {
  it('is the README usage block, line for line', () => {
    const readme = readFileSync(join(PROJECT_ROOT, 'README.md'), 'utf8');
    const start = readme.indexOf('```sh\n', readme.indexOf('## The command line')) + '```sh\n'.length;
    expect(readme.slice(start, readme.indexOf('\n```', start))).toBe(usageBlock());
  });

  it.each(COMMANDS.map((c) => [c.name, c] as const))('%s: its usage names every option it declares, and no other', (_name, c) => {
    const usage = c.usage.join(' ');
    for (const option of Object.keys(c.options)) expect(usage).toContain(`--${option}`);
    for (const named of usage.match(/--[a-z][a-z-]*/g) ?? []) expect(Object.keys(c.options)).toContain(named.slice(2));
  });

  it('gives typed values and precise errors', () => {
    const spec = {
      n: { kind: 'int', value: 'N' },
      s: { kind: 'positive', value: 'S' },
      f: { kind: 'flag' },
      c: { kind: 'string', value: 'X', choices: ['a', 'b'], default: 'a' },
    } as const;
    expect(parseOptions(spec, ['x', '--n', '3', '--s', '0.5', '--f']).values).toEqual({ n: 3, s: 0.5, f: true, c: 'a' });
    expect(parseOptions(spec, ['x']).positionals).toEqual(['x']);
    expect(() => parseOptions(spec, ['--n', '0'])).toThrow(new UsageError('--n must be a positive integer, got "0"'));
    expect(() => parseOptions(spec, ['--n', '1.5'])).toThrow(UsageError);
    expect(() => parseOptions(spec, ['--s=-1'])).toThrow(new UsageError('--s must be a positive number, got "-1"'));
    expect(() => parseOptions(spec, ['--c', 'z'])).toThrow(new UsageError('--c must be a or b, got "z"'));
    expect(() => parseOptions(spec, ['--nope'])).toThrow(UsageError);
  });
});
