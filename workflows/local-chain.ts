/**
 * A run's chains of local activities (a replay's decisions, read-only steps): consecutive local
 * activities on the run's path, each started by the code after the previous one's result, up to
 * the next step that is not local (a regular activity, a timer, a wait, a child).
 *
 * Hazard (docs/decisions.md, "What a history decides"): the code after a local activity's result
 * can run in a later workflow task the first time than on a replay. The SDK's core records the
 * activity's marker in the workflow task it completes; when that task is completed early (to
 * answer a Query that arrived with it), the result reaches the workflow code in the next task,
 * after that task's Signals, timers and child outcomes and with its clock and history figures,
 * while a replay delivers it in the first task, before them. So, for as long as a chain is open:
 *
 * - what reaches the run (a Signal's effect, a task's outcome or news, the deadline's timer) is
 *   held and takes effect, in arrival order, once the chain's next step has been issued: both
 *   runs reach that point having seen none of it;
 * - the clock and the history figures the run's path reads are those of the chain's start;
 * - a local activity cannot be cancelled, so a cancel request reaches the chain's next step,
 *   which both runs issue before they learn of it (the first run into a cancelled scope, where
 *   the step never starts; a replay cancels it before it was sent, which the core drops).
 *
 * The chain closes when the activation it left off in ends with no local activity in flight.
 * Only runs of a build that asks its changes at a segment's start (workflows/changes.ts) work so;
 * an older history replays as it ran (`enabled` false).
 *
 * Hazard, the same in every workflow task: what reaches the run by a promise (a task's outcome,
 * the deadline timer's firing) and the run path's own result (an activity's) can come in one
 * workflow task. The SDK resolves both promises, then runs what follows each; which runs first
 * depends on how many promise steps lie between (the traced bundle's interceptors add some to an
 * activity's, none to a child's or a timer's), so a run of one bundle and its replay on the other
 * could see the task's outcome before or after the path read the tasks. Such an effect is
 * therefore taken only once the workflow task's promises have settled (a condition, which the SDK
 * checks after them): the path has gone as far as its results take it, on either bundle, having
 * seen none of it (`settled`; for runs of a build before `ARRIVALS_PATCH` it takes effect as it did).
 */
import * as wf from '@temporalio/workflow';
import { workflowTime } from './time';

/** What a run reads of its history's figures, as of a chain's start when one is open. */
export interface HistoryFigures {
  continueAsNewSuggested: boolean;
  historyLength: number;
  historySize: number;
  targetWorkerDeploymentVersionChanged: boolean;
}

interface ChainStart {
  time: number;
  figures: HistoryFigures;
}

function figuresNow(): HistoryFigures {
  const info = wf.workflowInfo();
  return {
    continueAsNewSuggested: info.continueAsNewSuggested,
    historyLength: info.historyLength,
    historySize: info.historySize,
    targetWorkerDeploymentVersionChanged: info.targetWorkerDeploymentVersionChanged,
  };
}

export class LocalChains {
  private inFlight = 0;
  private open: ChainStart | null = null;
  private readonly held: (() => void)[] = [];
  /** What reached the run by a promise in the workflow task being processed, not taken yet. */
  private readonly arrived: (() => void)[] = [];
  /**
   * The one scope every local activity of the run's path runs in: not cancellable, so neither is
   * the activity. One for the run rather than one per activity: a scope costs a few promises
   * (each one hooked by the SDK) and a reaction on its parent's that stays until the parent ends.
   * Nothing in it depends on the caller's scope: a scope that cannot be cancelled passes no
   * cancellation to what runs in it.
   */
  private readonly shield = new wf.CancellationScope({ cancellable: false });

  constructor(
    private readonly enabled: boolean,
    private readonly settled: boolean,
  ) {
    // Not cancellable: a cancel request must not end the loops that close chains and take arrivals.
    if (enabled) void wf.CancellationScope.nonCancellable(() => this.closeEach());
    if (settled) void wf.CancellationScope.nonCancellable(() => this.takeArrivals());
  }

  /** Runs one local activity of the run's path, in the chain open now or a new one. */
  async run<T>(activity: () => Promise<T>): Promise<T> {
    if (!this.enabled) return activity();
    this.open ??= { time: workflowTime(), figures: figuresNow() };
    this.inFlight++;
    try {
      return await this.shield.run(activity);
    } finally {
      this.inFlight--;
    }
  }

  /** An effect of something that reached the run: now, or when the open chain has closed. */
  receive(effect: () => void): void {
    if (this.open !== null) this.held.push(effect);
    else effect();
  }

  /** The effect of what reached the run by a promise: taken (as `receive` takes it) once the workflow task's promises have settled. */
  arrive(effect: () => void): void {
    if (this.settled) this.arrived.push(effect);
    else this.receive(effect);
  }

  /** The run path's clock. */
  now(): number {
    return this.open?.time ?? workflowTime();
  }

  /** The history figures the run's path decides by. */
  figures(): HistoryFigures {
    return this.open?.figures ?? figuresNow();
  }

  private async closeEach(): Promise<never> {
    for (;;) {
      await wf.condition(() => this.open !== null && this.inFlight === 0);
      this.open = null;
      for (const effect of this.held.splice(0)) effect();
    }
  }

  private async takeArrivals(): Promise<never> {
    for (;;) {
      await wf.condition(() => this.arrived.length > 0);
      for (const effect of this.arrived.splice(0)) this.receive(effect);
    }
  }
}
