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
  /**
   * The one scope every local activity of the run's path runs in: not cancellable, so neither is
   * the activity. One for the run rather than one per activity: a scope costs a few promises
   * (each one hooked by the SDK) and a reaction on its parent's that stays until the parent ends.
   * Nothing in it depends on the caller's scope: a scope that cannot be cancelled passes no
   * cancellation to what runs in it.
   */
  private readonly shield = new wf.CancellationScope({ cancellable: false });

  constructor(private readonly enabled: boolean) {
    // Not cancellable: a cancel request must not end the loop that closes chains.
    if (enabled) void wf.CancellationScope.nonCancellable(() => this.closeEach());
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
}
