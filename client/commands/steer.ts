/** `steer` and `interrupt`: a person's message to a running run. */
import { command, UsageError } from '../command';
import { access, handleFor } from './shared';

export const steer = command({
  name: 'steer',
  usage: ['steer <workflow-id> <message>'],
  summary: 'add a user message to the next decision (Signal steer)',
  options: {},
  check(positionals) {
    if (!positionals[1]) throw new UsageError('missing <message>');
  },
  async run(session, positionals) {
    const { ORIGIN, sendSteer } = await access();
    await sendSteer(await handleFor(session, positionals), positionals.slice(1).join(' '), `${ORIGIN}:steer`);
    return 0;
  },
});

export const interrupt = command({
  name: 'interrupt',
  usage: ['interrupt <workflow-id> [--reason TEXT]'],
  summary: 'stop the current turn at once: its running call or verification is cut off (Signal interrupt)',
  options: { reason: { kind: 'string', value: 'TEXT' } },
  async run(session, positionals, values) {
    const { ORIGIN, sendInterrupt } = await access();
    await sendInterrupt(await handleFor(session, positionals), values.reason, `${ORIGIN}:interrupt`);
    return 0;
  },
});
