/**
 * What a run's trace spans say about it: attributes read from an activity's arguments and result,
 * and from a run's record. Pure and workflow-safe: the workflow's interceptors use it for the
 * workflow-side spans, the worker's for the activity spans (workflows/interceptors.ts,
 * worker/tracing.ts). Values are short facts (ids, names, codes, counts), never file contents,
 * diffs or model text.
 *
 * Keys: `temporalWorkflowId` as the Temporal interceptors name it; the OpenTelemetry GenAI
 * conventions for model usage (`gen_ai.*`); `agent.*` for the rest.
 */
import type { RunRecord, Usage } from './contracts';

export type SpanAttributes = Record<string, string | number | boolean>;

export const ATTR = {
  workflowId: 'temporalWorkflowId',
  turn: 'agent.turn',
  retry: 'agent.retry',
  tool: 'agent.tool',
  callId: 'agent.call_id',
  actionId: 'agent.action_id',
  path: 'agent.path',
  errorCode: 'agent.error_code',
  outcome: 'agent.outcome',
  inputTokens: 'gen_ai.usage.input_tokens',
  outputTokens: 'gen_ai.usage.output_tokens',
  cachedTokens: 'agent.usage.cached_tokens',
  costUsd: 'agent.usage.cost_usd',
  modelCalls: 'agent.usage.model_calls',
  system: 'gen_ai.system',
  model: 'gen_ai.request.model',
  compacted: 'agent.context.compacted',
  fixture: 'agent.fixture',
  replay: 'agent.replay',
  status: 'agent.status',
  reason: 'agent.reason',
  turns: 'agent.turns',
  toolCalls: 'agent.tool_calls',
  writes: 'agent.writes',
  toolErrors: 'agent.tool_errors',
} as const;

type Obj = Record<string, unknown>;
const obj = (v: unknown): Obj | null => (v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Obj) : null);
const str = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);
const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);

/** Drops the absent values. */
function defined(attrs: Record<string, string | number | boolean | undefined | null>): SpanAttributes {
  return Object.fromEntries(
    Object.entries(attrs).filter((e): e is [string, string | number | boolean] => e[1] !== undefined && e[1] !== null),
  );
}

function usageAttributes(usage: unknown): SpanAttributes {
  const u = obj(usage) as Partial<Usage> | null;
  if (u === null) return {};
  return defined({
    [ATTR.inputTokens]: num(u.input_tokens),
    [ATTR.outputTokens]: num(u.output_tokens),
    [ATTR.cachedTokens]: num(u.cached_tokens),
    [ATTR.costUsd]: num(u.cost_usd),
    [ATTR.modelCalls]: num(u.model_calls),
  });
}

/** A call view (core/transcript.ts) as attributes: the tool, the call id, its path and turn. */
function callAttributes(view: unknown): SpanAttributes {
  const v = obj(view);
  if (v === null) return {};
  return defined({ [ATTR.tool]: str(v.name), [ATTR.callId]: str(v.call_id), [ATTR.path]: str(v.path), [ATTR.turn]: num(v.turn) });
}

/**
 * The local activity versions of read-only steps (`localDecide`, `localTool`) take the run's host
 * queue first and answer `elsewhere` on another host; otherwise they are `decide` and `executeTool`.
 */
function asRemote(activityType: string, args: readonly unknown[]): [string, readonly unknown[]] {
  if (activityType === 'localDecide') return ['decide', args.slice(1)];
  if (activityType === 'localTool') return ['executeTool', [args[1], args[2]]];
  return [activityType, args];
}

/** What an activity's arguments say (known before it runs): turn, tool, call and action. */
export function activityArgsAttributes(type: string, given: readonly unknown[]): SpanAttributes {
  const [activityType, args] = asRemote(type, given);
  switch (activityType) {
    case 'decide': {
      const input = obj(args[0]);
      const source = obj(input?.source);
      return defined({
        [ATTR.turn]: num(input?.turn),
        [ATTR.retry]: num(input?.retry) || undefined,
        [ATTR.system]: source?.kind === 'provider' ? str(source.provider) : undefined,
        [ATTR.model]: source?.kind === 'provider' ? str(source.model) : undefined,
      });
    }
    case 'executeTool':
    case 'preparePatch':
      return callAttributes(args[1]);
    case 'writePatch':
      return { ...callAttributes(args[2]), ...defined({ [ATTR.actionId]: str(obj(args[1])?.action_id) }) };
    case 'prepareMerge':
      return defined({ [ATTR.tool]: 'merge_task' });
    case 'writeMerge':
      return defined({ [ATTR.tool]: 'merge_task', [ATTR.actionId]: str(obj(args[1])?.action_id), [ATTR.path]: str(obj(args[1])?.path) });
    default:
      return {};
  }
}

/** What an activity's result says: the error code a tool result carries, the action prepared, model usage. */
export function activityResultAttributes(type: string, result: unknown): SpanAttributes {
  const r = obj(result);
  if (r === null) return {};
  if (r.kind === 'elsewhere') return { [ATTR.outcome]: 'elsewhere' };
  const [activityType] = asRemote(type, []);
  switch (activityType) {
    case 'decide': {
      // A read-only call run with the decision (`read_ahead`): the span says what a tool's would.
      const first = Array.isArray(r.decisions) ? obj(r.decisions[0]) : null;
      const ran = obj(first?.ran);
      return {
        ...defined({
          [ATTR.outcome]: str(r.kind),
          [ATTR.errorCode]: r.kind === 'model_error' ? 'model_error' : r.kind === 'refused' ? 'model_refused' : str(ran?.error),
          [ATTR.compacted]: r.compacted === true ? true : undefined,
        }),
        ...(ran ? callAttributes(first?.call) : {}),
        ...usageAttributes(r.usage),
      };
    }
    case 'executeTool':
      return defined({ [ATTR.errorCode]: str(r.error), [ATTR.outcome]: r.ok === true ? 'ok' : r.ok === false ? 'error' : undefined });
    case 'preparePatch':
    case 'prepareMerge': {
      const rejected = obj(r.result);
      return defined({
        [ATTR.outcome]: str(r.kind),
        [ATTR.actionId]: str(obj(r.action)?.action_id) ?? str(r.action_id),
        [ATTR.errorCode]: r.kind === 'rejected' ? str(rejected?.error) : undefined,
      });
    }
    case 'writePatch':
    case 'writeMerge':
      return defined({ [ATTR.outcome]: str(r.kind), [ATTR.errorCode]: r.kind === 'approval_stale' ? 'approval_stale' : undefined });
    case 'verify':
      return defined({ [ATTR.outcome]: r.passed === true ? 'passed' : r.passed === false ? 'failed' : undefined });
    default:
      return {};
  }
}

/** The run's span, at its end: what it worked on, how it ended, what it did and used. */
export function runAttributes(record: RunRecord): SpanAttributes {
  return {
    ...defined({
      [ATTR.fixture]: record.fixture,
      [ATTR.replay]: record.replay,
      [ATTR.status]: record.status,
      [ATTR.reason]: record.reason,
      [ATTR.turns]: record.turns,
      [ATTR.toolCalls]: record.tool_calls,
      [ATTR.writes]: record.writes,
      [ATTR.toolErrors]: Object.values(record.tool_errors).reduce((a: number, b) => a + (b ?? 0), 0),
    }),
    ...usageAttributes(record.usage),
  };
}
