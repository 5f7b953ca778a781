/**
 * Decisions and the run's stored record of them: the next decision of a replay or a live model
 * (validated here, stored whole, carried by digest), and the trace and transcript the workflow
 * hands over to the host store.
 */
import { Context } from '@temporalio/activity';
import type { DecideInput, DecideResult, Elsewhere, SourceRef } from '../core/activities';
import type { Decision, Replay } from '../core/contracts';
import { nonRetryable } from '../core/failures';
import type { PromptTexts } from '../core/prompt';
import { withTaskIds } from '../core/tasks';
import { isOrchestrationTool } from '../core/tools';
import type { TraceEvent } from '../core/trace';
import { brief, resultView, type CallView, type DecisionView, type PendingEntry, type TranscriptEntry } from '../core/transcript';
import { validateCall, type Validation } from '../core/validate';
import { buildId } from '../host/build';
import { digestJson } from '../host/digest';
import { faultAfter, faultPoint } from '../host/faults';
import { liveDecide } from '../models/live';
import { loadPrompt } from '../models/prompt';
import { replayNext } from '../models/replay';
import type { Kit } from './kit';
import { readAhead } from './tools';

/** Parsed replays a worker keeps (most recently used). */
const REPLAYS_KEPT = 16;

type ReplayInput = DecideInput & { source: Extract<SourceRef, { kind: 'replay' }> };

/** Decisions of one worker: its replay cache, and the store every decision and transcript entry goes to. */
class Decider {
  /**
   * Replays by digest, parsed once: a stored replay never changes (its digest is its content), so
   * each decision does not parse the whole file again. A few are kept, whatever the number of runs.
   */
  private readonly replays = new Map<string, Replay>();

  constructor(private readonly kit: Kit) {}

  private get store() {
    return this.kit.store;
  }

  /** Stores the entries the workflow has not stored yet; results it made itself go in whole. */
  appendTranscript(transcript: { head: string | null; append: PendingEntry[] }): string | null {
    const store = this.store;
    return store.appendTranscript(
      transcript.head,
      transcript.append.map((e): TranscriptEntry => {
        if ('message' in e) return e;
        const reply = e.reply ?? null;
        if (e.result === undefined) return { decision: e.decision, reply };
        return { decision: e.decision, reply, result: 'ref' in e.result ? e.result.ref : store.put('result', e.result.inline) };
      }),
    );
  }

  private storedReplay(digest: string): Replay {
    const replays = this.replays;
    let replay = replays.get(digest);
    if (replay === undefined) {
      replay = this.store.get<Replay>(digest);
      if (replays.size >= REPLAYS_KEPT) replays.delete(replays.keys().next().value!);
    } else replays.delete(digest);
    replays.set(digest, replay);
    return replay;
  }

  /** A decision as the workflow sees it: validated here, stored whole, carried by digest. */
  private decisionView(
    decision: Exclude<Decision, { kind: 'model_error' }>,
    input: { run_id: string; turn: number; orchestrating?: boolean },
    reply: string | null,
    validated?: Validation,
  ): DecisionView {
    const store = this.store;
    const ref = store.put('decision', decision);
    if (decision.kind !== 'tool') return { kind: decision.kind, text: brief(decision.text) as string, ref, reply };
    const validation = validated ?? validateCall(decision.call, `call-${input.turn}`, input.orchestrating ?? false);
    if (!validation.ok) return { kind: 'tool', ref, raw: brief(decision.call), call: null, invalid: validation.result, reply };
    const call = validation.call;
    const path = 'path' in call.arguments && typeof call.arguments.path === 'string' ? call.arguments.path : null;
    const view: CallView = {
      call_id: call.call_id,
      name: call.name,
      path,
      ref: store.put('call', call),
      identity: digestJson({ name: call.name, arguments: call.arguments }),
      turn: input.turn,
    };
    if (isOrchestrationTool(call.name)) {
      const { requirements: _r, known_facts: _k, suggestions: _s, ...args } = call.arguments as Record<string, unknown>;
      view.task = { action_id: digestJson({ run_id: input.run_id, name: call.name, arguments: call.arguments }), args };
    }
    return { kind: 'tool', ref, raw: brief(decision.call), call: view, invalid: null, reply };
  }

  /**
   * The next decision of a stored replay and, asked with `read_ahead`, the result of a valid
   * read-only call it makes (core/activities.ts). One transaction: the transcript entries, the
   * request, the decision and the result cost one sync.
   */
  async replayDecide(input: ReplayInput): Promise<DecideResult> {
    const store = this.store;
    const { run_id, source, cursor, turn, tools_enabled, read_ahead } = input;
    const next = replayNext(this.storedReplay(source.digest), cursor);
    const decision = next === undefined || next.kind === 'model_error' || !input.tasks ? next : withTaskIds(next, input.tasks);
    const validation = decision?.kind === 'tool' ? validateCall(decision.call, `call-${turn}`, input.orchestrating ?? false) : undefined;
    const ran = read_ahead && validation?.ok ? await readAhead(this.kit, read_ahead.ref, validation.call, read_ahead.timeout_ms) : null;
    return store.batch((): DecideResult => {
      const head = this.appendTranscript(input.transcript);
      store.put('model_request', { run_id, source, cursor, turn, tools_enabled, transcript: head });
      if (decision === undefined) return { kind: 'exhausted', head, usage: null };
      if (decision.kind === 'model_error') {
        const ref = store.put('decision', decision);
        const detail = `the replay's model_error (${decision.transient ? 'transient' : 'permanent'})`;
        return {
          kind: 'model_error',
          transient: decision.transient,
          cut_off: false,
          retry_after_ms: null,
          detail,
          ref,
          cursor: cursor + 1,
          head,
          usage: null,
        };
      }
      const view = this.decisionView(decision, input, null, validation);
      if (ran !== null && view.kind === 'tool' && view.call !== null) view.ran = resultView(ran, store.put('result', ran));
      return { kind: 'decisions', decisions: [view], cursor: cursor + 1, head, usage: null };
    });
  }

  /** A live model's next reply, through the operator's endpoint looked up again by name at each call. */
  async liveNext(input: DecideInput & { source: Extract<SourceRef, { kind: 'provider' }> }): Promise<DecideResult> {
    const { kit, store } = this;
    const { config } = kit;
    const head = this.appendTranscript(input.transcript);
    const ctx = Context.current();
    const { source } = input;
    // Looked up again at each call, by name: the URL and the key variable are the operator's alone.
    const found = kit.lookupEndpoint(source.endpoint, source.model);
    if (!found.ok || found.endpoint.kind !== source.provider) {
      const detail = found.ok ? `endpoint ${source.endpoint} is now of kind ${found.endpoint.kind}, not ${source.provider}` : found.detail;
      throw nonRetryable('ProviderUnavailable', detail);
    }
    // The content loadRun stored; a run from before prompts were versioned takes the newest version.
    const prompt = source.prompt
      ? { ref: source.prompt, texts: store.get<PromptTexts>(source.prompt.digest) }
      : loadPrompt(config.promptsDir);
    const live = {
      store,
      prices: config.prices ?? {},
      timeoutMs: config.modelTimeoutMs ?? 120_000,
      signal: ctx.cancellationSignal,
      heartbeat: () => ctx.heartbeat(),
      credential: config.credential,
      baseUrls: config.baseUrls,
      endpoint: found.endpoint,
      prompt,
    };
    return liveDecide(live, input, head, (decisions, reply) => ({
      kind: 'decisions',
      decisions: decisions.map((d) => this.decisionView(d, input, reply)),
      cursor: input.cursor,
      head,
      usage: null,
    }));
  }
}

export function decideActivities(kit: Kit) {
  const decider = new Decider(kit);
  return {
    /** The next decision, and the build of the worker that took it (the run records which builds served it). */
    async decide(input: DecideInput): Promise<DecideResult> {
      const result =
        input.source.kind === 'provider'
          ? await decider.liveNext({ ...input, source: input.source })
          : await decider.replayDecide({ ...input, source: input.source });
      return { ...result, build: buildId() };
    },

    /**
     * `decide` of a replay as a local activity: run by the worker of the workflow task, with no
     * server round trip, when that worker is on the run's host; `elsewhere` otherwise.
     */
    async localDecide(hostQueue: string | null, input: DecideInput): Promise<DecideResult | Elsewhere> {
      if (input.source.kind !== 'replay') throw nonRetryable('ProtocolError', 'a live decision is never a local activity');
      if (!kit.onThisHost(hostQueue)) return kit.elsewhere();
      const result = { ...(await decider.replayDecide({ ...input, source: input.source })), build: buildId() };
      faultAfter('after_local_activity');
      return result;
    },

    /** Stores trace events and transcript entries the workflow holds; returns the transcript's head. */
    async persist(input: {
      run_id: string;
      trace: TraceEvent[];
      transcript: { head: string | null; append: PendingEntry[] };
      task_finishing?: boolean;
    }): Promise<string | null> {
      if (input.task_finishing) faultPoint('child_finishing');
      return kit.store.batch(() => {
        kit.store.appendTrace(input.run_id, input.trace);
        return decider.appendTranscript(input.transcript);
      });
    },
  };
}
