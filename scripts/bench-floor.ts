/**
 * `npm run bench`'s floor figure, in a process of its own (so its worker and bundler weigh
 * nothing on the harness worker's memory): on the bench's dev server, steps of two no-op local
 * activities, the SDK's own cost of a read-only step as the issue set it. Prints the milliseconds
 * per step of each repeat, and the CPU time this process spent per step (every thread), with two
 * and with one local activity a step, as JSON. With ACTIVITIES, LOCALS and ELSEWHERE, also the
 * milliseconds of a run of that many no-op regular and local activities (`noopRun`), per repeat:
 * the canonical run's Temporal work with nothing in it, the last ELSEWHERE of its activities on a
 * second worker's queue as a pinned run's are on its host's (`run`), and the same run with every
 * activity on the workflow's own queue, which the SDK dispatches eagerly (`runEager`).
 *
 *   node dist/scripts/bench-floor.js ADDRESS STEPS REPEATS [ACTIVITIES LOCALS ELSEWHERE]
 *
 * With `park`, the floor of the parked runs instead: a worker of `noopParked` runs with the
 * harness worker's cache, started like the harness's worker (host/worker-launch.ts) and serving
 * until SIGTERM. Its workflow bundle is made beforehand by the bench, in BUNDLE, as the harness's
 * worker loads its bundle from the build. When the settings name a trace receiver, it traces as
 * the harness's worker does (OpenTelemetry's interceptors, the spans exported over OTLP).
 *
 *   node dist/scripts/bench-floor.js park ADDRESS TASK_QUEUE BUNDLE
 */
import { Client } from '@temporalio/client';
import { connectClient } from '../host/connection';
import {
  makeWorkflowExporter,
  OpenTelemetryActivityInboundInterceptor,
  OpenTelemetryActivityOutboundInterceptor,
} from '@temporalio/interceptors-opentelemetry';
import { bundleWorkflowCode, NativeConnection, Worker } from '@temporalio/worker';
import { installRuntime } from '../host/runtime';
import { readSettings } from '../host/settings';
import { startTracing } from '../host/tracing';

async function parkWorker(address: string, taskQueue: string, bundle: string): Promise<void> {
  const settings = readSettings();
  installRuntime('WARN');
  const connection = await NativeConnection.connect({ address });
  const tracing = startTracing(settings, 'coding-agent-worker');
  const worker = await Worker.create({
    connection,
    taskQueue,
    workflowBundle: { codePath: bundle },
    activities: { async noop() {} },
    maxCachedWorkflows: settings.maxCachedWorkflows,
    ...(tracing && {
      interceptors: {
        activity: [
          (ctx) => ({
            inbound: new OpenTelemetryActivityInboundInterceptor(ctx),
            outbound: new OpenTelemetryActivityOutboundInterceptor(ctx),
          }),
        ],
      },
      sinks: { exporter: makeWorkflowExporter(tracing.processor, tracing.resource) },
    }),
  });
  try {
    await worker.run(); // until SIGTERM: the runtime shuts its workers down on it
  } finally {
    await tracing?.shutdown();
    await connection.close();
  }
}

async function main(): Promise<void> {
  if (process.argv[2] === 'park') {
    const [address, taskQueue, bundle] = process.argv.slice(3);
    return parkWorker(address, taskQueue, bundle);
  }
  const [address, stepsArg, repeatsArg, activitiesArg, localsArg, elsewhereArg] = process.argv.slice(2);
  const steps = Number(stepsArg);
  const repeats = Number(repeatsArg);
  installRuntime('WARN');
  const connection = await NativeConnection.connect({ address });
  const clientConnection = await connectClient({ address });
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
  // With a run to time, the second queue's worker, as a host's: activities only, on the same connection.
  const hostQueue = `${taskQueue}-host`;
  const host =
    activitiesArg === undefined ? null : await Worker.create({ connection, taskQueue: hostQueue, activities: { async noop() {} } });
  const hostRunning = host?.run();
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
      const out: { ms: number[]; cpu: number[]; cpuOne: number[]; run: number[]; runEager: number[] } = {
        ms: [],
        cpu: [],
        cpuOne: [],
        run: [],
        runEager: [],
      };
      const noopRun = async (args: unknown[]) => {
        const t = performance.now();
        await client.workflow.execute('noopRun', { taskQueue, workflowId: `${taskQueue}-${++n}`, args });
        return performance.now() - t;
      };
      const [activities, locals, elsewhere] = [Number(activitiesArg), Number(localsArg), Number(elsewhereArg)];
      // The second queue's worker and both shapes of the run warmed too.
      if (host !== null) await Promise.all([noopRun([activities, locals, elsewhere, hostQueue]), noopRun([activities, locals])]);
      for (let r = 0; r < repeats; r++) {
        const [a, b] = [await timed(steps), await timed(0)];
        out.ms.push((a.ms - b.ms) / steps);
        out.cpu.push((a.cpu - b.cpu) / steps);
        const one = await timed(steps, 1);
        out.cpuOne.push((one.cpu - b.cpu) / steps);
        if (host !== null) {
          out.run.push(await noopRun([activities, locals, elsewhere, hostQueue]));
          out.runEager.push(await noopRun([activities, locals]));
        }
      }
      return out;
    });
    process.stdout.write(`${JSON.stringify(perStep)}\n`);
  } finally {
    host?.shutdown();
    await hostRunning;
    await clientConnection.close();
    await connection.close();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
