/** `branch` and `patch`: a completed repository run's verified change, back in the repository. */
import { command, UsageError } from '../command';
import { out } from './shared';

export const branch = command({
  name: 'branch',
  usage: ['branch <workflow-id> [--name NAME] [--json]'],
  summary:
    "make a completed repository run's verified change a branch of the repository: one commit on the base commit\n" +
    '(default name agent/<workflow-id>); the working tree, the index, HEAD and every other ref are left alone',
  options: {
    name: { kind: 'string', value: 'NAME' },
    json: { kind: 'flag' },
  },
  check(positionals) {
    if (!positionals[0]) throw new UsageError('missing <workflow-id>');
  },
  async run(session, positionals, values) {
    const { branchFromRun, NoBranch } = await import('../branch');
    try {
      const made = await branchFromRun(session, positionals[0], values.name);
      out(values.json ? made : `branch ${made.branch} at ${made.commit} (parent ${made.base}): ${made.paths.length} path(s) changed`);
      return 0;
    } catch (err) {
      if (!(err instanceof NoBranch)) throw err;
      process.stderr.write(`${err.message}\n`);
      return 1;
    }
  },
});

export const patch = command({
  name: 'patch',
  usage: ['patch <workflow-id>'],
  summary: "print a completed repository run's verified change as a patch for git apply (nothing is written to the repository)",
  options: {},
  check(positionals) {
    if (!positionals[0]) throw new UsageError('missing <workflow-id>');
  },
  async run(session, positionals) {
    const { patchFromRun, NoBranch } = await import('../branch');
    try {
      process.stdout.write(await patchFromRun(session, positionals[0]));
      return 0;
    } catch (err) {
      if (!(err instanceof NoBranch)) throw err;
      process.stderr.write(`${err.message}\n`);
      return 1;
    }
  },
});
