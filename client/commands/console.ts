/** `console`: the approval console in a browser. */
import { resolve } from 'node:path';
import { command, RefusedInput, UsageError } from '../command';
import { isLoopback, parsePublicUrl, refusal } from '../console/origin';
import { out, webUi } from './shared';

export const consoleCommand = command({
  name: 'console',
  usage: ['console [--port 8787] [--host ADDRESS --public-url https://NAME[:PORT]] [--token-file FILE]'],
  summary:
    'serve the approval console: runs awaiting approval, the card of each pending action, Approve / Reject in a browser.\n' +
    'Bound to 127.0.0.1 unless --host is given; any other address needs --public-url, the https address of the TLS terminator\n' +
    'in front of it (cookies are then Secure and only that name is answered). Prints a one-time sign-in link (one use, within\n' +
    '10 minutes); after that, sign in by typing the token: the first line of --token-file, or a fresh one written to\n' +
    "<state>/console-token (mode 0600). Machine clients of its API (a run's event stream, actions) send one of the tokens of\n" +
    '<state>/api-tokens (NAME TOKEN a line, mode 0600; made with a token for this command line when missing) as a bearer token.',
  options: {
    port: { kind: 'int', value: '8787', default: 8787, min: 0 },
    host: { kind: 'string', value: 'ADDRESS', default: '127.0.0.1' },
    'public-url': { kind: 'string', value: 'https://NAME[:PORT]' },
    'token-file': { kind: 'string', value: 'FILE' },
  },
  check(_positionals, values) {
    const origin = values['public-url'] === undefined ? null : parsePublicUrl(values['public-url']);
    if (typeof origin === 'string') throw new RefusedInput(origin);
    const refused = refusal(values.host, origin);
    if (refused !== null) throw new RefusedInput(refused);
  },
  async run(session, _positionals, values) {
    const { freshToken, readToken, stateApiTokens } = await import('../console/token');
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
    let api: { file: string; tokens: Map<string, string> };
    try {
      api = stateApiTokens(session.settings.stateDir);
    } catch (err) {
      throw new UsageError(`API tokens: ${(err as Error).message}`);
    }
    const { CODE_TTL_MS, startConsole } = await import('../console/server');
    const { host, port } = values;
    if (!isLoopback(host))
      process.stderr.write(
        `warning: serving the console on ${host}, not a loopback address: anyone who reaches it and holds the token or a sign-in link can approve writes\n`,
      );
    await session.ensureWorker();
    const app = await startConsole({
      client: session.client,
      token,
      host,
      port,
      publicUrl: values['public-url'] ?? null,
      webUi: webUi(session),
      namespace: session.namespace,
      stateDir: session.settings.stateDir,
      apiTokens: api.tokens,
      recordDir: session.settings.stateDir,
    });
    out(`console on ${app.url}; sign in at ${app.signInLink()} (one use, within ${CODE_TTL_MS / 60_000} minutes)`);
    out(`or sign in at ${app.publicUrl}/login with the token in ${resolve(tokenFile)}`);
    out(`machine clients: ${app.publicUrl}/api/runs/<workflow-id>/events with a bearer token of ${resolve(api.file)}`);
    await new Promise<void>((done) => {
      process.once('SIGINT', done);
      process.once('SIGTERM', done);
    });
    await app.close();
    return 0;
  },
});
