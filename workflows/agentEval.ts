/**
 * agentEval: a batch evaluation as a parent workflow.
 *
 * The batch is a compact plan (fixtures, their replays, epochs, one configuration); run `i` is a
 * pure function of the plan, and its child agentRun has a workflow id made of its key
 * (`<batch>/<fixture>/<replay>/e<epoch>`, `~<attempt>` for a retry), so the full record of each
 * run is that child's result and a resume can find it. The parent holds only counters and the
 * set in flight: a sliding window of at most `concurrency` children. It continues as new when
 * Temporal suggests it or after `SEGMENT_RUNS` starts, after its window has drained.
 */
import * as wf from '@temporalio/workflow';
import type { RunInput, RunStatus } from '../core/contracts';
import { agentRun } from './agentRun';
import { evalProgressQuery } from './messages';
import { workflowTime } from './time';
import { plannedRun, planSize, runWorkflowId, type EvalInput, type EvalProgress, type EvalResult } from '../core/batch-plan';

export interface EvalCarried {
  next: number;
  progress: EvalProgress;
  started_at: number;
}

/** Children started by one segment before it continues as new (its history stays far below the limits). */
const SEGMENT_RUNS = 200;

export async function agentEval(input: EvalInput, carried?: EvalCarried): Promise<EvalResult> {
  const { plan } = input;
  const total = planSize(plan);
  const batch = wf.workflowInfo().workflowId;
  const progress: EvalProgress = carried?.progress ?? {
    total,
    done: 0,
    completed: 0,
    running: 0,
    kept: 0,
    by_status: {},
    segment: 1,
    elapsed_s: 0,
    eta_s: null,
  };
  const startedAt = carried?.started_at ?? workflowTime();
  let next = carried?.next ?? 0;
  let startedHere = 0;
  const freshDone = () => progress.done - progress.kept;
  const refresh = () => {
    progress.elapsed_s = Math.round((workflowTime() - startedAt) / 1000);
    const perRun = freshDone() > 0 ? progress.elapsed_s / freshDone() : null;
    progress.eta_s = perRun === null ? null : Math.round(perRun * (total - progress.done));
  };
  wf.setHandler(evalProgressQuery, () => {
    refresh();
    return progress;
  });

  const attemptOf = (index: number) => (input.attempts ? Number(input.attempts[index]) : 1);
  let inFlight = 0;
  const runOne = async (index: number): Promise<void> => {
    const run = plannedRun(plan, index);
    const fixture = plan.fixtures[run.fixture];
    const replay = fixture.replays[run.replay];
    const child: RunInput = {
      ...(fixture.repo ? { repo: fixture.repo } : { fixture: fixture.dir }),
      ...(plan.live
        ? {
            source: { kind: 'provider', endpoint: plan.live.endpoint, model: plan.live.model },
            ...(plan.live.prompt !== undefined ? { prompt: plan.live.prompt } : {}),
          }
        : { source: { kind: 'replay', path: replay.path, trusted: replay.trusted } }),
      backend: plan.backend,
      approver: plan.approver as RunInput['approver'],
      ...(plan.host_lost_s ? { host_lost_s: plan.host_lost_s } : {}),
      ...(plan.allow_test_config_change ? { allow_test_config_change: true } : {}),
    };
    let status: RunStatus;
    try {
      const outcome = await wf.executeChild(agentRun, {
        args: [child],
        workflowId: runWorkflowId(batch, plan, run, attemptOf(index)),
        // A run outlives a parent that is terminated: a resume finds its outcome by its key.
        parentClosePolicy: 'ABANDON',
        // The id is the run's key: a second start of the same key is refused, never a second run.
        workflowIdReusePolicy: 'REJECT_DUPLICATE',
      });
      status = outcome.record.status;
    } catch (err) {
      // Terminated by hand, or its key already taken: no outcome of its own (the report says which).
      wf.log.warn('a run of the batch ended without an outcome', { index, error: String(err) });
      status = 'failed';
    }
    progress.by_status[status] = (progress.by_status[status] ?? 0) + 1;
    if (status === 'completed') progress.completed++;
    progress.done++;
  };

  const segmentFull = () => startedHere >= SEGMENT_RUNS || wf.workflowInfo().continueAsNewSuggested;
  while (next < total && !segmentFull()) {
    const index = next++;
    if (attemptOf(index) === 0) {
      progress.kept++;
      progress.done++;
      continue;
    }
    await wf.condition(() => inFlight < input.concurrency);
    inFlight++;
    startedHere++;
    progress.running = inFlight;
    void runOne(index).finally(() => {
      inFlight--;
      progress.running = inFlight;
    });
  }
  // The window drains before the batch continues as new or ends: a child's outcome is awaited
  // by the segment that started it.
  await wf.condition(() => inFlight === 0);
  refresh();
  if (next < total) {
    await wf.condition(wf.allHandlersFinished);
    // No child in flight: a newer build that is the deployment's current version takes the next segment (docs/versioning.md).
    const options = wf.workflowInfo().targetWorkerDeploymentVersionChanged ? { initialVersioningBehavior: 'AUTO_UPGRADE' as const } : {};
    return wf.makeContinueAsNewFunc<typeof agentEval>(options)(input, {
      next,
      progress: { ...progress, segment: progress.segment + 1 },
      started_at: startedAt,
    });
  }
  return { progress, out: input.out ?? null };
}
