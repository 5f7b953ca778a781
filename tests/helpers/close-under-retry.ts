/**
 * A process of its own (an uncaught exception ends it, whatever the test runner does): a client
 * connection to the server at argv[2] through a relay of this process, the relay cut, a call
 * made (it fails UNAVAILABLE and is retried), and the connection closed during the retry's wait.
 * argv[3] is `sdk` for the SDK's own connection or `ours` for `connectClient`; argv[4] is `retry`
 * (the connection closed while the call waits for its retry) or `before` (closed before the call is
 * made). It prints one JSON line: how the call ended (`rejected`, `resolved` or `no answer` within
 * 10 s) and the uncaught exception, if any.
 */
import { createServer, connect, type Socket } from 'node:net';
import { Client, Connection } from '@temporalio/client';
import { connectClient } from '../../host/connection';

async function main(address: string, how: string, when: string): Promise<void> {
  let uncaught: string | null = null;
  process.on('uncaughtException', (err) => (uncaught = err.message));
  const [host, port] = [address.slice(0, address.lastIndexOf(':')), Number(address.slice(address.lastIndexOf(':') + 1))];
  const sockets = new Set<Socket>();
  const relay = createServer((down) => {
    const up = connect(port, host);
    for (const [a, b] of [
      [down, up],
      [up, down],
    ]) {
      sockets.add(a);
      a.pipe(b);
      a.on('error', () => b.destroy());
      a.on('close', () => b.destroy());
    }
  });
  await new Promise<void>((r) => relay.listen(0, '127.0.0.1', r));
  const options = { address: `127.0.0.1:${(relay.address() as { port: number }).port}` };
  // eslint-disable-next-line no-restricted-properties -- the SDK's own connection, to show what connectClient changes
  const connection = how === 'sdk' ? await Connection.connect(options) : await connectClient(options);
  relay.close();
  for (const s of sockets) s.destroy();
  if (when === 'before') await connection.close();
  const call = new Client({ connection }).workflow
    .getHandle('close-under-retry')
    .describe()
    .then(
      () => 'resolved',
      () => 'rejected',
    );
  if (when !== 'before') {
    await new Promise((r) => setTimeout(r, 300));
    await connection.close();
  }
  const answer = await Promise.race([call, new Promise((r) => setTimeout(() => r('no answer'), 10_000))]);
  process.stdout.write(`${JSON.stringify({ answer, uncaught })}\n`);
}

if (require.main === module) void main(process.argv[2], process.argv[3], process.argv[4]);
