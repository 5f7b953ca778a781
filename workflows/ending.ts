/**
 * agentRun's scopes and its end: the scope of the run's work (`inRunScope`) and of its deadline
 * (`withDeadline`), what the error that ended the work means (`endOf`), the verifier's judgement
 * of a `final` (`verify`), a new segment (`continueAsNew`), the trace's store (`storeTrace`), and
 * the run's record (`finish`). It touches the run's state and trace through `EndRun`, and holds
 * only the two scopes a stop cancels.
 */
import * as wf from '@temporalio/workflow';
import { isCancellation } from '@temporalio/workflow';
import { errorResult, type ToolResult, type UnreceiptedChange } from '../core/contracts';
import { buildRecord, type RunOutcome, type RunView } from '../core/run-view';
import type { TurnState } from '../core/trace';
import { brief } from '../core/transcript';
import { LEGACY_CHANGES } from './changes';
import type { LocalChains } from './local-chain';
import { ACTIVITY_OPTIONS, failedStep, Phase, RunStop, testStepOptions, type RunBase } from './run-base';
import type { PendingCall, RunState } from './run-state';
import type { Orchestration } from './subruns';

/** Trace events go to the host store in batches of at most this many bytes of JSON. */
const TRACE_BATCH_BYTES = 48 * 1024;
/** At most this much unstored trace is carried into the next segment. */
const TRACE_CARRY_BYTES = 16 * 1024;
/** How long an ending orchestrating run waits for the tasks it stopped (a task on a lost host never answers). */
const TASKS_END_WAIT_MS = 60_000;

/** The workflow's signature, as continue-as-new calls it. */
type AgentRunWorkflow = (rawInput: unknown, carried?: RunState) => Promise<RunOutcome>;

/** What the scopes and the end need of the run beyond `RunBase`. */
export interface EndRun extends RunBase {
  readonly tasks: Orchestration;
  readonly chains: LocalChains;
  /** Set once the run's host is found gone. */
  readonly hostLost: boolean;
  /** Set as the run records its end: a message arriving later is not taken. */
  ended: boolean;
  /** Applies the effect of what reached the run by a promise (the deadline timer's firing) once the workflow task's promises have settled. */
  arrive(effect: () => void): void;
  interruptible<T>(step: () => Promise<T>): Promise<T | null>;
  takeInterrupt(): string;
  finalInterrupted(reason: string, during: 'decision' | 'verification'): void;
  unreceipted(change: UnreceiptedChange, callId?: string): void;
  observe(result: ToolResult, counted?: boolean): void;
  turnState(): TurnState;
  onHost<T>(fn: () => Promise<T>): Promise<T | null>;
  noteHostLost(err: unknown): boolean;
  hostLostDetail(): string;
}

export class Ending extends Phase<EndRun> {
  /** The scope of the loop: a parent's stop cancels it. */
  private loopScope: wf.CancellationScope | null = null;
  /** The scope of all the run's work from loading on (`prompt_messages`): a stop or a cancel request cancels it. */
  private runScope: wf.CancellationScope | null = null;

  /** A stop: the run's work is cancelled at once (before its loop: as it begins). */
  cancelWork(): void {
    (this.runScope ?? this.loopScope)?.cancel();
  }

  /** The host verifier's judgement of a `final`; null when an interrupt cut it off and the run goes on. */
  async verify(finalText: string, finalRef: string): Promise<RunStop | null> {
    this.view.final_summary = brief(finalText) as string;
    this.run.setStatus('verifying');
    this.trace.add('verification_started', { final: finalText });
    const timeout = Math.max(1000, this.run.msLeft());
    const findings = await this.run.interruptible(() =>
      this.act.verify.executeWithOptions(testStepOptions(timeout, 'verify'), [this.ref, timeout, finalRef]),
    );
    if (findings === null) {
      this.run.setStatus('running');
      this.run.finalInterrupted(this.run.takeInterrupt(), 'verification');
      return null;
    }
    this.view.verification = findings;
    for (const change of findings.unreceipted ?? []) this.run.unreceipted(change);
    if (findings.passed) {
      this.trace.add('verification_passed', findings);
      return new RunStop('completed', '');
    }
    this.trace.add('verification_failed', findings);
    const protocolError = findings.acceptance?.error ?? null;
    return new RunStop('failed', protocolError !== null ? 'verification_error' : 'verification_failed', protocolError);
  }

  /**
   * Continues as new under the same workflow id: the trace and transcript are stored first, and
   * the next segment gets the state (counters, budgets, deadline, pending action, an approval
   * already received) but no contents.
   */
  async continueAsNew(pendingCall: PendingCall | null): Promise<never> {
    const info = this.run.chains.figures();
    // A newer build is the deployment's current version: the next segment starts on it, unless a
    // write waits for its approval, which the build that prepared it carries to its end
    // (docs/versioning.md).
    const upgrade = info.targetWorkerDeploymentVersionChanged && pendingCall === null;
    this.trace.add('continued_as_new', {
      segment: this.view.segment,
      history_events: info.historyLength,
      history_bytes: info.historySize,
      pending_action: pendingCall?.action.action_id ?? null,
      to_current_version: upgrade,
    });
    await this.storeTrace();
    await wf.condition(wf.allHandlersFinished);
    // Signals that arrived while storing are in workflow state now, and are carried, with their
    // trace events (stored again first if a burst of them made those many).
    while (this.trace.unstoredBytes() > TRACE_CARRY_BYTES) await this.storeTrace();
    this.view.segment++;
    this.state.pending_write = pendingCall;
    if (pendingCall === null) this.state.reply_rest = [];
    this.state.trace = this.trace.carried();
    if (!upgrade) return wf.continueAsNew<AgentRunWorkflow>(this.input, this.state);
    return wf.makeContinueAsNewFunc<AgentRunWorkflow>({ initialVersioningBehavior: 'AUTO_UPGRADE' })(this.input, this.state);
  }

  /**
   * Stores the trace events held only here, and the transcript entries not stored yet.
   * `finishing`: the run's last store, before its outcome goes back (a task's run marks it for the crash tests).
   * `once`: a single attempt (a run that ended because its state folder was full does not wait for space again).
   */
  async storeTrace(finishing = false, once = false): Promise<void> {
    const batches = this.trace.flushable(TRACE_BATCH_BYTES);
    if (batches.length === 0) batches.push([]);
    const retry = once ? { retry: { ...ACTIVITY_OPTIONS.retry, maximumAttempts: 1 } } : {};
    for (const [i, events] of batches.entries()) {
      const last = i === batches.length - 1;
      const head = await this.act.persist.executeWithOptions({ summary: `store ${events.length} trace events`, ...retry }, [
        {
          run_id: this.view.run_id,
          trace: events,
          transcript: last ? this.state.transcript : { head: this.state.transcript.head, append: [] },
          ...(finishing && last && this.view.parent ? { task_finishing: true } : {}),
        },
      ]);
      this.trace.markStored(events.length);
      if (last) this.state.transcript = { head, append: [] };
    }
  }

  /**
   * The run's work from loading on, in one scope that a stop or a cancel request cancels at once
   * (a stop that arrived earlier, with the start or carried, cancels it as it begins); what ends
   * it becomes the run's end. A run that began before `prompt_messages` loads outside any scope,
   * as it ran.
   */
  async inRunScope(work: () => Promise<RunStop>): Promise<RunStop> {
    if (!this.state.prompt_messages) return work();
    const scope = new wf.CancellationScope();
    this.runScope = scope;
    if (this.state.stop !== null) scope.cancel();
    try {
      return await scope.run(work);
    } catch (err) {
      return this.endOf(err);
    } finally {
      this.runScope = null;
    }
  }

  /**
   * Runs `body` under the run's deadline (a workflow timer). When the deadline and an external
   * cancellation coincide, both are kept and the reason is `cancelled`.
   */
  async withDeadline(body: () => Promise<RunStop>): Promise<RunStop> {
    const loopScope = new wf.CancellationScope();
    this.loopScope = loopScope;
    const timerScope = new wf.CancellationScope();
    timerScope
      .run(async () => {
        // The deadline bounds the agent's working time: it does not run while a write waits for its approval.
        // What the timer's firing means is decided once the workflow task's promises have settled (arrive).
        const waiting = () => this.state.waiting_since !== null;
        for (;;) {
          if (this.changes.deadlinePaused) {
            // The timer is cancelled when a wait begins, and started again for the time left when it ends.
            if (waiting()) await wf.condition(() => !waiting());
            if (await wf.condition(waiting, Math.max(1, this.run.msLeft()))) continue;
          } else await wf.sleep(Math.max(1, this.run.msLeft()));
          const next = await new Promise<'wait' | 'end' | 'again'>((resolve) =>
            this.run.arrive(() => resolve(waiting() ? 'wait' : this.run.msLeft() <= 0 ? 'end' : 'again')),
          );
          if (next === 'wait') await wf.condition(() => !waiting());
          else if (next === 'end') return;
        }
      })
      .then(() => {
        this.view.deadline_reached = true;
        loopScope.cancel();
      })
      .catch(() => undefined); // the timer is cancelled when the body ends first
    try {
      return await loopScope.run(body);
    } catch (err) {
      return this.endOf(err);
    } finally {
      timerScope.cancel();
      this.loopScope = null;
    }
  }

  /** What the error that ended the run's work means: a stop, a cancel request, the deadline, a lost host, a failure. */
  private endOf(err: unknown): RunStop {
    if (err instanceof RunStop) return err;
    // A parent stopped this task's run: its cut-off call gets its result in finish().
    if (isCancellation(err) && this.state.stop !== null) return new RunStop('cancelled', 'interrupted', this.state.stop);
    if (isCancellation(err)) {
      if (wf.CancellationScope.current().consideredCancelled)
        return new RunStop('cancelled', 'cancelled', this.view.deadline_reached ? 'the deadline was also reached' : null);
      if (this.view.deadline_reached) return new RunStop('budget_exhausted', 'deadline');
    }
    if (this.run.noteHostLost(err)) return new RunStop('failed', 'host_lost', this.run.hostLostDetail());
    const stop = failedStep(err, true, this.changes);
    if (stop === null) throw err;
    return stop;
  }

  /**
   * Records the terminal status. A call still without a result gets one now, so no proposed call
   * is left unanswered. A cancelled run also returns normally (Temporal shows it as completed,
   * the AgentStatus search attribute as cancelled), so its record stays in its result.
   */
  async finish(stop: RunStop): Promise<RunOutcome> {
    await this.endTasks(stop.reason);
    if (this.state.in_flight !== null) {
      this.run.observe(
        errorResult(this.state.in_flight.call_id, 'interrupted', {
          reason: `not completed: the run ended (${stop.reason})`,
          run_end: stop.reason,
        }),
        false,
      );
    }
    this.view.pending_approval = null;
    this.view.reason = stop.reason === '' ? null : stop.reason;
    this.view.detail = stop.detail;
    this.view.unread = this.unread();
    this.run.ended = true;
    this.trace.add('run_finished', {
      status: stop.status,
      reason: this.view.reason,
      detail: stop.detail,
      deadline_reached: this.view.deadline_reached,
      builds: this.view.builds ?? [],
      ...(this.changes.has(LEGACY_CHANGES.turnState) ? { end: this.run.turnState() } : {}),
      ...(this.view.unread ? { unread: this.view.unread } : {}),
    });
    // A lost host's store is gone with it: the trace then lives in history only.
    if (!this.run.hostLost) {
      const notStored = await this.storeAtEnd(stop);
      // The outcome stands (it was reached on the host); only its trace is not stored.
      if (notStored !== null) this.view.detail = [stop.detail, `trace not stored: ${notStored}`].filter(Boolean).join('; ');
    }
    this.run.setStatus(stop.status);
    this.metrics.finished({
      status: stop.status,
      reason: this.view.reason,
      turns: this.view.counters.turns,
      task: this.view.parent !== null,
      deadlineReached: this.view.deadline_reached,
      costUsd: this.view.usage?.cost_usd ?? null,
    });
    const record = buildRecord(this.view);
    return {
      record,
      state: this.view,
      trace: { run_id: this.view.run_id, events: this.trace.next - 1 },
      transcript: this.state.transcript.head,
      cursor: this.state.cursor,
    };
  }

  /**
   * The run's last store (and its changed paths, when it never reached the verifier); why not,
   * when it could not be: its host is gone, or the store failed for good (a state folder still
   * full after the wait, for which a run that ended `disk_full` tries once).
   */
  private async storeAtEnd(stop: RunStop): Promise<string | null> {
    try {
      const stored = await this.run.onHost(() =>
        wf.CancellationScope.nonCancellable(async () => {
          if (this.view.verification === null && this.state.ref)
            this.view.diff_paths = await this.act.diffPaths({ run_id: this.ref.run_id });
          await this.storeTrace(true, stop.reason === 'disk_full');
          return true;
        }),
      );
      return stored === null ? this.run.hostLostDetail() : null;
    } catch (err) {
      if (!(err instanceof wf.ActivityFailure) || !this.changes.has(LEGACY_CHANGES.endsWithRecord)) throw err;
      return err.cause?.message ?? err.message;
    }
  }

  /**
   * Messages no decision read because the run ended first (a steer during the verification that
   * ended it, say): kept with its end, so none is lost without a word. Null when there are none.
   */
  private unread(): RunView['unread'] {
    const messages = [...this.state.steering];
    const interrupt = this.state.interrupted;
    return messages.length > 0 || interrupt !== null ? { messages, interrupt } : null;
  }

  /**
   * An orchestrating run that ends stops its tasks still running and waits a while for their
   * outcomes, so what they spent joins its tree (its close policy would cancel them unseen).
   */
  private async endTasks(reason: string): Promise<void> {
    if (!this.state.tree_budgets || this.run.hostLost || !this.run.tasks.active()) return;
    await wf.CancellationScope.nonCancellable(() =>
      this.run.tasks.stopAll(`the orchestrating run ended (${reason || 'completed'})`, TASKS_END_WAIT_MS),
    );
  }
}
