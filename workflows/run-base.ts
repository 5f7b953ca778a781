/**
 * What every phase of agentRun shares (agentRun.ts holds the run; one sibling module per phase:
 * startup.ts, decide.ts, writes.ts, ending.ts, subruns.ts): the stop that ends a run, the
 * activity options and proxies, the end of a step that failed for good, and `RunBase`, the part
 * of the run every phase module reads it through. No state lives here: the run's is its
 * `RunState` (run-state.ts), held by the run alone.
 */
import * as wf from '@temporalio/workflow';
import { ApplicationFailure } from '@temporalio/workflow';
import { errorResult, type Budgets, type ParsedRunInput, type RunStatus, type ToolResult } from '../core/contracts';
import { activityFailureReason, NON_RETRYABLE_FAILURE_TYPES, timeoutDetail } from '../core/failures';
import type { RunView } from '../core/run-view';
import type { Trace } from '../core/trace';
import type { Activities, Elsewhere, RunRef } from '../core/activities';
import type { RunReason } from '../core/reasons';
import { LEGACY_CHANGES, type Changes } from './changes';
import type { RunMetrics } from './metrics';
import type { RunState } from './run-state';

/**
 * Attempts of a step that runs the tests (run_tests, the verifier): a retried attempt runs them
 * all again, and an attempt that stops heartbeating means a worker died or hung during it.
 */
export const TEST_ATTEMPTS = 3;
/** A steering message is kept to this many characters. */
export const MAX_STEER_CHARS = 4000;
export const DEFAULT_HOST_LOST_S = 600;

/**
 * Every activity: bounded attempts (a crashed worker costs one each), and failures that would
 * repeat on every attempt are not retried at all (activities/index.ts marks them).
 */
export const ACTIVITY_OPTIONS: wf.ActivityOptions = {
  startToCloseTimeout: '10 seconds',
  retry: {
    initialInterval: '500 milliseconds',
    maximumInterval: '5 seconds',
    maximumAttempts: 10,
    nonRetryableErrorTypes: [...NON_RETRYABLE_FAILURE_TYPES],
  },
};
/** The shared queue: a run's first activity, taken by whichever host is free. */
/** A step that runs the tests (the base run, the verifier): it heartbeats, a retry runs them all again, a cancellation waits for their end. */
export function testStepOptions(timeout: wf.ActivityOptions['startToCloseTimeout'], summary: string): wf.ActivityOptions {
  return {
    startToCloseTimeout: timeout,
    heartbeatTimeout: '10 seconds',
    retry: { ...ACTIVITY_OPTIONS.retry, maximumAttempts: TEST_ATTEMPTS },
    cancellationType: wf.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    summary,
  };
}
export const sharedQueue = wf.proxyActivities<Activities>(ACTIVITY_OPTIONS);
export type RunActivities = typeof sharedQueue;

/**
 * Every later activity goes to the queue of the host that loaded the run. A task that no worker
 * of that host picks up within `host_lost_s` means the host is gone (Temporal does not retry a
 * schedule-to-start timeout): the run ends `host_lost` rather than continue elsewhere.
 */
export function hostActivities(queue: string | null, hostLostS: number | undefined): RunActivities {
  if (queue === null) return sharedQueue;
  return wf.proxyActivities<Activities>({
    ...ACTIVITY_OPTIONS,
    taskQueue: queue,
    scheduleToStartTimeout: (hostLostS ?? DEFAULT_HOST_LOST_S) * 1000,
  });
}

/**
 * Read-only steps as local activities (a replay's decision; read_file, search, show_diff): the
 * worker of the workflow task runs them, with no server round trip. With several hosts that
 * worker may not hold the run's workspace: the activity then answers `elsewhere` and the step
 * goes to the run's host as a regular activity. That answer is in history, so a replay takes
 * the same path.
 */
export const local = wf.proxyLocalActivities<Activities>({ startToCloseTimeout: '10 seconds', retry: ACTIVITY_OPTIONS.retry });

export const isElsewhere = (answer: object): answer is Elsewhere => (answer as { kind?: unknown }).kind === 'elsewhere';

export function isHostLost(err: unknown): boolean {
  return err instanceof wf.ActivityFailure && err.cause instanceof wf.TimeoutFailure && err.cause.timeoutType === 'SCHEDULE_TO_START';
}

/** Ends the loop with a terminal status; thrown from helpers, caught once in the main function. */
export class RunStop {
  constructor(
    readonly status: RunStatus,
    /** '' for a completed run: it has no reason. */
    readonly reason: RunReason | '',
    readonly detail: string | null = null,
  ) {}
}

/**
 * The end of a run whose step failed for good: a non-retryable failure (or retries exhausted)
 * with its type's reason, a step that timed out on each attempt (a worker that died or hung each
 * time) as `infrastructure_error`; null for anything else. `always`: the loop's own steps, which
 * ended runs with a non-retryable failure's reason before the patch (the first step, `loadRun`,
 * failed its workflow then).
 */
export function failedStep(err: unknown, always: boolean, changes: Changes): RunStop | null {
  if (!(err instanceof wf.ActivityFailure)) return null;
  if (err.cause instanceof ApplicationFailure && (always || changes.has(LEGACY_CHANGES.endsWithRecord)))
    return new RunStop('failed', activityFailureReason(err.cause.type), err.cause.message);
  if (err.cause instanceof wf.TimeoutFailure && changes.has(LEGACY_CHANGES.endsWithRecord))
    return new RunStop('failed', 'infrastructure_error', timeoutDetail(err.activityType, err.cause.timeoutType));
  return null;
}

/**
 * The run as every phase module reads it: its state (one value), its trace, its input and what
 * loading made of it, the activities of its host, the changes its segment holds, its metrics and
 * its clock. The run (agentRun.ts) implements it; each module's own interface adds the few
 * steps of other phases it calls.
 */
export interface RunBase {
  readonly state: RunState;
  readonly trace: Trace;
  readonly input: ParsedRunInput;
  /** `state.view`: what the `state` Query answers. */
  readonly view: RunView;
  /** `state.ref`, once loaded: the reference every later activity gets. */
  readonly ref: RunRef;
  /** `view.budgets`, once loaded. */
  readonly budgets: Budgets;
  /** The activities of the host that holds the run. */
  readonly act: RunActivities;
  /** Which changes this segment's history holds (workflows/changes.ts). */
  readonly changes: Changes;
  /** The governance metrics (not emitted while replaying). */
  readonly metrics: RunMetrics;
  /** The run path's clock: as of the open chain's start while one is open (workflows/local-chain.ts). */
  now(): number;
  msLeft(): number;
  setStatus(status: RunStatus): void;
}

/** What a phase module's class reads of the run, named as the run's own code names it. */
export abstract class Phase<Run extends RunBase> {
  constructor(protected readonly run: Run) {}
  protected get state(): RunState {
    return this.run.state;
  }
  protected get view(): RunView {
    return this.run.state.view;
  }
  protected get trace(): Trace {
    return this.run.trace;
  }
  protected get input(): ParsedRunInput {
    return this.run.input;
  }
  protected get ref(): RunRef {
    return this.run.ref;
  }
  protected get budgets(): Budgets {
    return this.run.budgets;
  }
  protected get act(): RunActivities {
    return this.run.act;
  }
  protected get changes(): Changes {
    return this.run.changes;
  }
  protected get metrics(): RunMetrics {
    return this.run.metrics;
  }
}

/** Builds a run's state names at most (the first, then the newest). */
const MAX_BUILDS = 8;

/** A build that took part in the run, once (results recorded before builds were reported carry none). */
export function noteBuild(view: RunView, build: string | undefined): void {
  const builds = (view.builds ??= []);
  if (build === undefined || builds.includes(build)) return;
  // A long run's workers are rebuilt rarely; the first and the newest few are what matter.
  if (builds.length >= MAX_BUILDS) builds.splice(1, 1);
  builds.push(build);
}

/** The result of a call an interrupt stopped: before it ran, or cut off while it ran. */
export function interruptedResult(callId: string, reason: string, how: 'not executed' | 'cut off' = 'not executed'): ToolResult {
  return errorResult(callId, 'interrupted', { reason: `${how}: ${reason}` });
}
