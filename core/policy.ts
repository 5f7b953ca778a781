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
  /** Exact repo-relative paths that may be modified; patterns when `writable_match` is `pattern`. */
  writable: readonly string[];
  /** Patterns of paths that may be created. */
  new_files: readonly string[];
  /** A repository run's protected patterns: no write may touch them, whatever the lists above say. */
  protected?: readonly string[];
  /** A repository run's `writable` holds patterns (`*`, `**`); a fixture's holds exact paths. */
  writable_match?: 'exact' | 'pattern';
}

/**
 * Code points some file systems ignore in names (HFS+ drops these when it compares), so
 * `.git\u200Chub` and `.github` name one folder there.
 */
const IGNORED_IN_NAMES = /[\u00ad\u200b-\u200f\u202a-\u202e\u2060-\u2064\u206a-\u206f\ufeff]/g;

/**
 * A path as the most forgiving file system a checkout lands on compares it: Unicode NFC, case
 * folded, ignorable code points dropped, and per segment Windows' trailing dots and spaces and an
 * NTFS stream name (`:...`) cut off. Two paths with the same fold can be the same file.
 */
export function foldPath(path: string): string {
  return path
    .normalize('NFC')
    .replace(IGNORED_IN_NAMES, '')
    .toLowerCase()
    .normalize('NFC')
    .split('/')
    .map((segment) => segment.replace(/:.*$/, '').replace(/[. ]+$/, ''))
    .join('/');
}

/**
 * True when a protected pattern of the scope matches the path, compared folded (foldPath): a
 * protected file is protected under every name that can open it on some checkout.
 */
export function isProtectedPath(scope: PolicyScope, path: string): boolean {
  const folded = foldPath(path);
  return (scope.protected ?? []).some((p) => globMatches(p, path) || globMatches(foldPath(p), folded));
}

/** True when the path may be modified (a fixture's writable file, or a repository's writable pattern). */
export function isWritable(scope: PolicyScope, path: string): boolean {
  if (isProtectedPath(scope, path)) return false;
  return scope.writable_match === 'pattern' ? scope.writable.some((p) => globMatches(p, path)) : scope.writable.includes(path);
}

/** True when a file may be created at the path. */
export function mayCreate(scope: PolicyScope, path: string): boolean {
  return !isProtectedPath(scope, path) && scope.new_files.some((p) => globMatches(p, path));
}

/**
 * True when a write ends the "red" window of `red_observed`: a write to a fixture's writable file,
 * or, in a repository run (where patterns make nearly everything writable), a change to a file of
 * the base tree; creating a file (a new test) does not end it there.
 */
export function endsRedWindow(scope: PolicyScope, path: string, before: string): boolean {
  if (!isWritable(scope, path)) return false;
  return scope.writable_match !== 'pattern' || before !== 'absent';
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
    matches: (call, path, scope) => call.name === 'apply_patch' && path !== null && isWritable(scope, path),
  },
  {
    id: 'allowed-new-file',
    decision: 'ask',
    why: 'the path matches a new_files pattern',
    matches: (call, path, scope) => call.name === 'apply_patch' && path !== null && mayCreate(scope, path),
  },
  {
    id: 'protected-pattern',
    decision: 'deny',
    why: "the path matches a protected pattern of the repository's settings",
    matches: (call, path, scope) => call.name === 'apply_patch' && path !== null && isProtectedPath(scope, path),
  },
  {
    id: 'protected-path',
    decision: 'deny',
    why: 'every path that is neither writable nor an allowed new file is protected',
    matches: (call, path, scope) => call.name === 'apply_patch' && (path === null || (!isWritable(scope, path) && !mayCreate(scope, path))),
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

/**
 * An approver as a run names it: `interactive` (a person answers each write through the Signal)
 * or `policy:<name>` (one of APPROVAL_POLICIES, each action on its own). Parsed here, and only here.
 */
export type Approver = { kind: 'interactive' } | { kind: 'policy'; name: string; known: boolean };

export function parseApprover(approver: string): Approver {
  if (!approver.startsWith('policy:')) return { kind: 'interactive' };
  const name = approver.slice('policy:'.length);
  return { kind: 'policy', name, known: Object.hasOwn(APPROVAL_POLICIES, name) };
}

/** The known policies, as an approver names them. */
export const KNOWN_POLICIES = Object.keys(APPROVAL_POLICIES).map((p) => `policy:${p}`);

/**
 * True when the approver leaves each write to a person: `interactive`. Every named policy above
 * decides alone, so a repository's settings (untrusted input) may name none of them; only the
 * user's `--approver` (or a batch's) chooses one.
 */
export function asksAPerson(approver: string): boolean {
  return parseApprover(approver).kind === 'interactive';
}
