/**
 * Strict validation of a proposed call, before any side effect: the envelope, the tool name,
 * the arguments, and the lexical path rules. Paths in the returned call are normalised, so the
 * same proposal always yields the same action_id.
 */
import { z } from 'zod';
import { CALL_ID, errorResult, toolCallEnvelope, type ToolResult } from './contracts';
import { normalizeRepoPath } from './paths';
import { isToolName, toolNames, TOOLS, type ValidCall } from './tools';

export type Validation = { ok: true; call: ValidCall } | { ok: false; result: ToolResult };

/** At most this many issues are reported for one call; a flood of unknown fields stays small. */
const MAX_ISSUES = 20;

function issues(error: z.ZodError): { path: string; message: string }[] {
  return error.issues.slice(0, MAX_ISSUES).map((i) => ({ path: i.path.join('.').slice(0, 200), message: i.message.slice(0, 400) }));
}

/** One line for people: `path: message; path: message`. */
export function formatIssues(error: z.ZodError): string {
  return error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ');
}

/**
 * `fallbackCallId` names the result when the proposal has no usable call_id of its own;
 * `orchestrating` adds the sub-run tools to the five.
 */
export function validateCall(raw: unknown, fallbackCallId: string, orchestrating = false): Validation {
  const rawId = (raw as { call_id?: unknown } | null)?.call_id;
  const callId = typeof rawId === 'string' && CALL_ID.test(rawId) ? rawId : fallbackCallId;

  const envelope = toolCallEnvelope.safeParse(raw);
  if (!envelope.success) {
    return { ok: false, result: errorResult(callId, 'invalid_fields', { issues: issues(envelope.error) }) };
  }
  const { name } = envelope.data;
  if (!isToolName(name, orchestrating)) {
    return { ok: false, result: errorResult(callId, 'unknown_tool', { name: name.slice(0, 64), tools: toolNames(orchestrating) }) };
  }
  const args = TOOLS[name].args.safeParse(envelope.data.arguments);
  if (!args.success) {
    return { ok: false, result: errorResult(callId, 'invalid_fields', { issues: issues(args.error) }) };
  }
  const parsed = args.data as Record<string, unknown>;
  if (Array.isArray(parsed.paths)) {
    const normalized: string[] = [];
    for (const p of parsed.paths as string[]) {
      const checked = normalizeRepoPath(p, false);
      if (!checked.ok) return { ok: false, result: errorResult(callId, 'path_denied', { path: p, reason: checked.reason }) };
      normalized.push(checked.path);
    }
    parsed.paths = [...new Set(normalized)].sort();
  }
  if (typeof parsed.path === 'string') {
    const checked = normalizeRepoPath(parsed.path, name === 'search');
    if (!checked.ok) return { ok: false, result: errorResult(callId, 'path_denied', { path: parsed.path, reason: checked.reason }) };
    parsed.path = checked.path;
  }
  return { ok: true, call: { call_id: callId, name, arguments: parsed } as ValidCall };
}
