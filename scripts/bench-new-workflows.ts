/**
 * The bench's figure of what one more workflow costs a worker thread, for each of the build's
 * workflow bundles, in a process of its own (run with --expose-gc): the SDK's reusable context
 * instantiates every module that is not preloaded again for each workflow it holds, so a cached
 * run keeps that much heap and a burst of starts makes it as garbage once per run. Prints, per
 * bundle, the heap kept per workflow (after a full collection) and the CPU of making one, once for
 * each repeat of `count` workflows made and kept.
 * Usage: node --expose-gc dist/scripts/bench-new-workflows.js <count> <repeats>
 */
import { readFileSync } from 'node:fs';
import type { WorkflowInfo } from '@temporalio/workflow';
import { parseWorkflowCode } from '@temporalio/worker/lib/worker';
import { ReusableVMWorkflowCreator } from '@temporalio/worker/lib/workflow/reusable-vm';
import { WORKFLOW_BUNDLES, type BundleKind } from '../worker';

const gc = (globalThis as { gc?: () => void }).gc;

/** What the worker passes for a new run, as far as making a workflow reads it. */
function info(n: number): WorkflowInfo {
  const id = `new-workflow-${n}`;
  return {
    workflowType: 'agentRun',
    workflowId: id,
    runId: id,
    firstExecutionRunId: id,
    taskQueue: 'bench',
    namespace: 'default',
    attempt: 1,
    historyLength: 3,
    historySize: 0,
    continueAsNewSuggested: false,
    searchAttributes: {},
    typedSearchAttributes: [],
    memo: {},
    taskTimeoutMs: 10_000,
    currentBuildId: '',
    unsafe: { now: () => Date.now(), isReplaying: false, isReplayingHistoryEvents: false, random: Math.random },
  } as unknown as WorkflowInfo;
}

async function measure(kind: BundleKind, count: number, repeats: number) {
  const file = WORKFLOW_BUNDLES[kind];
  const creator = await ReusableVMWorkflowCreator.create(
    parseWorkflowCode(readFileSync(file, 'utf8'), file),
    5_000,
    new Set(),
    () => false,
  );
  const make = (n: number) =>
    creator.createWorkflow({ info: info(n), randomnessSeed: [1, n], now: Date.now(), showStackTraceSources: false });
  const kept = [await make(-1)];
  const kib: number[] = [];
  const cpu: number[] = [];
  for (let r = 0; r < repeats; r++) {
    gc!();
    const heap = process.memoryUsage().heapUsed;
    const start = process.cpuUsage();
    for (let i = 0; i < count; i++) kept.push(await make(r * count + i));
    const used = process.cpuUsage(start);
    cpu.push((used.user + used.system) / 1000 / count);
    gc!();
    kib.push((process.memoryUsage().heapUsed - heap) / 1024 / count);
  }
  for (const workflow of kept) await workflow.dispose();
  await creator.destroy();
  return { kib, cpu };
}

async function main(): Promise<void> {
  if (gc === undefined) throw new Error('run with --expose-gc');
  const [count, repeats] = process.argv.slice(2).map(Number);
  const out: Record<string, Awaited<ReturnType<typeof measure>>> = {};
  for (const kind of Object.keys(WORKFLOW_BUNDLES) as BundleKind[]) out[kind] = await measure(kind, count, repeats);
  process.stdout.write(JSON.stringify(out));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
