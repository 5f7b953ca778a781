/**
 * Which changes of the workflow code a run's history was recorded with (Temporal's patches), asked
 * once, at the start of each segment.
 *
 * Hazard, the SDK's rule: `patched(id)` answers from the markers of the workflow task being
 * processed, so a replay gives the first run's answer only when it asks at the same point of the
 * same workflow task. Code reached right after a local activity's result is not such a point: a
 * Query answered while that result waits to be delivered makes the SDK's core record the
 * activity's marker in one workflow task and run the code after it in the next, while a replay
 * runs that code in the first (docs/decisions.md, "What a history decides"). The start of a
 * segment is such a point, so this build asks one patch there, `SEGMENT_START_PATCH`, before any
 * other command, and it stands for every change below. A change made from now on is asked there
 * too, beside it, and never anywhere else.
 *
 * Histories of the builds before it (a run moved to this build, the committed histories) have
 * their markers where those builds asked them: there, and only there, `has` asks again.
 */
import * as wf from '@temporalio/workflow';

/** The patch that says every change below holds, and that nothing is asked after a segment's start. */
export const SEGMENT_START_PATCH = 'changes-at-segment-start';
/**
 * Asked beside it: what reaches the run by a promise (a task's outcome, the deadline timer's
 * firing) takes effect once the workflow task's promises have settled (workflows/local-chain.ts).
 */
export const ARRIVALS_PATCH = 'arrivals-after-the-path';
/**
 * Asked beside them: the deadline's timer is cancelled while the run waits for a person and started
 * again, for the time left, when the wait ends (a parked run does no work at its deadline).
 */
export const DEADLINE_PAUSE_PATCH = 'deadline-paused-while-waiting';
/*
 * Changes that came with it, and so are held by `current` alone: the candidate tests' run on the
 * untouched base before a run's first write (`beforeFirstWrite`, an activity no older build
 * scheduled).
 */

/** The changes builds before `SEGMENT_START_PATCH` asked where their code took effect. */
export const LEGACY_CHANGES = {
  /** A step that timed out on every attempt, or a trace not stored at the end, ends the run with its record. */
  endsWithRecord: 'ends-with-record',
  /** Tasks draw on their orchestrating run's budgets (docs/sub-runs.md). */
  treeBudgets: 'tree-budgets',
  /** Each turn's start and the run's end state (`TurnState`, which a fork restores) are traced. */
  turnState: 'turn-state',
  /** Each reply's text is traced as `model_replied` (a stream's turn-end frame). */
  replyEvent: 'reply-event',
  /** A stop, a cancel request and an interrupt take effect at any moment (docs/how-a-run-goes.md). */
  messages: 'messages-at-any-moment',
} as const;
export type LegacyChange = (typeof LEGACY_CHANGES)[keyof typeof LEGACY_CHANGES];

export class Changes {
  /** True when this segment was started by a build that asks its changes at the start (every run of this one). */
  readonly current: boolean;
  /** True when this segment takes what reaches it by a promise once the task's promises have settled (`ARRIVALS_PATCH`). */
  readonly arrivalsSettled: boolean;
  /** True when this segment's deadline timer does not run while the run waits for a person (`DEADLINE_PAUSE_PATCH`). */
  readonly deadlinePaused: boolean;
  /** The legacy changes a history of an older build was found to hold. */
  private readonly taken = new Set<LegacyChange>();

  /** Call before the segment issues any other command. */
  constructor() {
    this.current = wf.patched(SEGMENT_START_PATCH);
    this.arrivalsSettled = this.current && wf.patched(ARRIVALS_PATCH);
    this.deadlinePaused = this.arrivalsSettled && wf.patched(DEADLINE_PAUSE_PATCH);
  }

  /**
   * Whether `change` holds here. In a history of an older build this asks the SDK, so it must be
   * called exactly where that build asked (the call sites in workflows/agentRun.ts are those).
   */
  has(change: LegacyChange): boolean {
    if (this.current) return true;
    const holds = wf.patched(change);
    if (holds) this.taken.add(change);
    return holds;
  }

  /** Whether a history of an older build was found to hold `change` (always, in a current one). */
  took(change: LegacyChange): boolean {
    return this.current || this.taken.has(change);
  }

  /**
   * `has` for a change an older build asked right after a local activity's result (its reply's
   * text, `reply-event`). When that build's first run recorded the marker in the next workflow
   * task (the hazard above), a replay reaches this point one task early: with the marker absent
   * from this task, it waits for the next one (no command), where it learns of the marker, then
   * asks. Only for a history whose build is known to ask `change` here (`askedHere`), since in any
   * other the code after this point may have recorded more commands in this task, which waiting
   * would leave unmatched.
   */
  async hasAfterLocal(change: LegacyChange, askedHere: boolean): Promise<boolean> {
    if (this.has(change)) return true;
    if (!askedHere || !wf.workflowInfo().unsafe.isReplaying) return false;
    const task = wf.workflowInfo().historyLength;
    await wf.condition(() => wf.workflowInfo().historyLength !== task);
    return this.has(change);
  }
}
