/** `console`: the approval console in a browser. */
import { resolve } from 'node:path';
import { command, UsageError } from '../command';
import { out, webUi } from './shared';

export const consoleCommand = command({
  name: 'console',
  usage: ['console [--port 8787] [--host ADDRESS] [--token-file FILE]'],
  summary:
    'serve the approval console: runs awaiting approval, the card of each pending write, Approve / Reject in a browser.\n' +
    'Bound to 127.0.0.1 unless --host is given. Prints a one-time sign-in link (one use, within 10 minutes); after that, sign in\n' +
    'by typing the token: the first line of --token-file, or a fresh one written to <state>/console-token (mode 0600).',
  options: {
    port: { kind: 'int', value: '8787', default: 8787, min: 0 },
    host: { kind: 'string', value: 'ADDRESS', default: '127.0.0.1' },
    'token-file': { kind: 'string', value: 'FILE' },
  },
  async run(session, _positionals, values) {
    const { freshToken, readToken } = await import('../console/token');
    let token: string;
    let tokenFile: string;
    if (values['token-file']) {
      tokenFile = values['token-file'];
      try {
        token = readToken(tokenFile);
      } catch (err) {
        throw new UsageError(`--token-file: ${(err as Error).message}`);
      }
    } else {
      ({ token, file: tokenFile } = freshToken(session.settings.stateDir));
    }
    const { CODE_TTL_MS, isLoopback, startConsole } = await import('../console/server');
    const { host, port } = values;
    if (!isLoopback(host))
      process.stderr.write(
        `warning: serving the console on ${host}, not a loopback address: anyone who reaches it and holds the token or a sign-in link can approve writes\n`,
      );
    await session.ensureWorker();
    const app = await startConsole({ client: session.client, token, host, port, webUi: webUi(session), namespace: session.namespace });
    out(`console on ${app.url}; sign in at ${app.signInLink()} (one use, within ${CODE_TTL_MS / 60_000} minutes)`);
    out(`or sign in at ${app.url}/login with the token in ${resolve(tokenFile)}`);
    await new Promise<void>((done) => {
      process.once('SIGINT', done);
      process.once('SIGTERM', done);
    });
    await app.close();
    return 0;
  },
});
