/** `export-replay`: a finished run's decisions as a replay (SPEC section 5). */
import { command } from '../command';
import { exportReplay as fromTranscript } from '../export-replay';
import { openStore } from '../../store/store';
import { access, handleFor, out } from './shared';

export const exportReplay = command({
  name: 'export-replay',
  usage: ['export-replay <workflow-id>'],
  summary: "print a finished run's decisions as a replay (SPEC section 5), from the host store of this machine",
  options: {},
  async run(session, positionals) {
    const handle = await handleFor(session, positionals);
    const { isRunning, runOutcome } = await access();
    if (await isRunning(handle)) {
      process.stderr.write(`${handle.workflowId} is still running; export it when it has finished\n`);
      return 2;
    }
    const outcome = await runOutcome(handle);
    const store = openStore(session.settings.stateDir);
    if (store === null) {
      process.stderr.write(`no host store in ${session.settings.stateDir}: run this on the worker host that ran ${handle.workflowId}\n`);
      return 1;
    }
    try {
      out(JSON.stringify(fromTranscript(store, outcome.transcript), null, 2));
    } finally {
      store.close();
    }
    return 0;
  },
});
