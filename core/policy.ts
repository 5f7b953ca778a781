/**
 * Tool policy as ordered data: every rule that matches is collected and the strictest decision
 * wins (deny > ask > allow). A call no rule matches is denied. The evaluation says which rules
 * matched and why, so a denial can be explained.
 */
import { globMatches } from './paths';
import type { ToolName } from './tools';

/** What the policy looks at of a call: its tool; the target path is passed beside it. */
export interface PolicyCall {
  name: ToolName;
}

export type PolicyDecision = 'allow' | 'ask' | 'deny';

export interface PolicyScope {
  writable: readonly string[];
  new_files: readonly string[];
}

interface Rule {
  id: string;
  decision: PolicyDecision;
  why: string;
  /** `path` is the normalised target path for apply_patch, null for other tools. */
  matches(call: PolicyCall, path: string | null, scope: PolicyScope): boolean;
}

export const RULES: readonly Rule[] = [
  {
    id: 'read-only-tools',
    decision: 'allow',
    why: 'reading, searching, running the candidate tests and diffing change no file the policy protects',
    matches: (call) => call.name !== 'apply_patch',
  },
  {
    id: 'writable-file',
    decision: 'ask',
    why: 'the file is listed as writable',
    matches: (call, path, scope) => call.name === 'apply_patch' && path !== null && scope.writable.includes(path),
  },
  {
    id: 'allowed-new-file',
    decision: 'ask',
    why: 'the path matches a new_files pattern',
    matches: (call, path, scope) =>
      call.name === 'apply_patch' && path !== null && scope.new_files.some((p) => globMatches(p, path)),
  },
  {
    id: 'protected-path',
    decision: 'deny',
    why: 'every path that is neither writable nor an allowed new file is protected',
    matches: (call, path, scope) =>
      call.name === 'apply_patch' &&
      (path === null || (!scope.writable.includes(path) && !scope.new_files.some((p) => globMatches(p, path)))),
  },
];

const STRICTNESS: Record<PolicyDecision, number> = { allow: 0, ask: 1, deny: 2 };

export interface PolicyEvaluation {
  decision: PolicyDecision;
  matched: { id: string; decision: PolicyDecision; why: string }[];
}

export function evaluatePolicy(call: PolicyCall, path: string | null, scope: PolicyScope): PolicyEvaluation {
  const matched = RULES.filter((r) => r.matches(call, path, scope)).map(({ id, decision, why }) => ({ id, decision, why }));
  const decision = matched.reduce<PolicyDecision | null>(
    (worst, r) => (worst === null || STRICTNESS[r.decision] > STRICTNESS[worst] ? r.decision : worst),
    null,
  );
  return { decision: decision ?? 'deny', matched };
}

/**
 * Named approval policies for unattended runs. Each approves (or rejects) one action at a time,
 * with that action's own digests, and is recorded with principal `policy:<name>`.
 */
export const APPROVAL_POLICIES: Record<string, (evaluation: PolicyEvaluation) => 'approve' | 'reject'> = {
  // Approve each action the tool policy put at "ask"; anything else never reaches an approver.
  'approve-writable': (evaluation) => (evaluation.decision === 'ask' ? 'approve' : 'reject'),
};
