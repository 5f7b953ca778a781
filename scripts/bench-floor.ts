/**
 * `npm run bench`'s floor figure, in a process of its own (so its worker and bundler weigh
 * nothing on the harness worker's memory): on the bench's dev server, steps of two no-op local
 * activities, the SDK's own cost of a read-only step as the issue set it. Prints the milliseconds
 * per step of each repeat, and the CPU time this process spent per step (every thread), with two
 * and with one local activity a step, as JSON. With ACTIVITIES
 * and LOCALS, also the milliseconds of a run of that many no-op regular and local activities
 * (`noopRun`), per repeat: the canonical run's Temporal work with nothing in it.
 *
 *   node dist/scripts/bench-floor.js ADDRESS STEPS REPEATS [ACTIVITIES LOCALS]
 */
import { Client, Connection } from '@temporalio/client';
import { bundleWorkflowCode, NativeConnection, Worker } from '@temporalio/worker';
import { installRuntime } from '../host/runtime';

async function main(): Promise<void> {
  const [address, stepsArg, repeatsArg, activitiesArg, localsArg] = process.argv.slice(2);
  const steps = Number(stepsArg);
  const repeats = Number(repeatsArg);
  installRuntime('WARN');
  const connection = await NativeConnection.connect({ address });
  const clientConnection = await Connection.connect({ address });
  const client = new Client({ connection: clientConnection });
  const taskQueue = `bench-floor-${process.pid}`;
  const worker = await Worker.create({
    connection,
    taskQueue,
    workflowBundle: await bundleWorkflowCode({
      workflowsPath: require.resolve('./bench-floor-workflows'),
      logger: { trace() {}, debug() {}, info() {}, warn() {}, error: console.error, log() {} },
    }),
    activities: { async noop() {} },
  });
  try {
    const perStep = await worker.runUntil(async () => {
      let n = 0;
      const timed = async (count: number, locals = 2) => {
        const t = performance.now();
        const cpu = process.cpuUsage();
        await client.workflow.execute('noopSteps', { taskQueue, workflowId: `${taskQueue}-${++n}`, args: [count, locals] });
        const used = process.cpuUsage(cpu);
        return { ms: performance.now() - t, cpu: (used.user + used.system) / 1000 };
      };
      // Warm as the harness's worker is when it is measured: a whole run of each kind first.
      await timed(steps);
      await timed(steps, 1);
      await timed(0);
      const out: { ms: number[]; cpu: number[]; cpuOne: number[]; run: number[] } = { ms: [], cpu: [], cpuOne: [], run: [] };
      for (let r = 0; r < repeats; r++) {
        const [a, b] = [await timed(steps), await timed(0)];
        out.ms.push((a.ms - b.ms) / steps);
        out.cpu.push((a.cpu - b.cpu) / steps);
        const one = await timed(steps, 1);
        out.cpuOne.push((one.cpu - b.cpu) / steps);
        if (activitiesArg !== undefined) {
          const t = performance.now();
          const args = [Number(activitiesArg), Number(localsArg)];
          await client.workflow.execute('noopRun', { taskQueue, workflowId: `${taskQueue}-${++n}`, args });
          out.run.push(performance.now() - t);
        }
      }
      return out;
    });
    process.stdout.write(`${JSON.stringify(perStep)}\n`);
  } finally {
    await clientConnection.close();
    await connection.close();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
