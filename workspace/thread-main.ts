/** A workspace thread (thread.ts): runs the operations of thread-ops.ts it is sent, one at a time, in order. */
import { parentPort } from 'node:worker_threads';
import { OPS } from './thread-ops';
import { toWire } from './thread';

type Call = { id: number; op: keyof typeof OPS; args: unknown[] };

parentPort!.on('message', (m: Call) => {
  let reply: { id: number; ok: boolean; value?: unknown; error?: ReturnType<typeof toWire> };
  try {
    const value = (OPS[m.op] as (...a: unknown[]) => unknown)(...m.args);
    reply = { id: m.id, ok: true, value };
  } catch (err) {
    reply = { id: m.id, ok: false, error: toWire(err) };
  }
  try {
    parentPort!.postMessage(reply);
  } catch (err) {
    // A value structured clone cannot carry is this side's fault, said as such.
    parentPort!.postMessage({ id: m.id, ok: false, error: toWire(err) });
  }
});
