import type { RunSpec } from '../core/contracts';
import type { ExecBackend } from '../sandbox/backends/types';
import type { Limits } from '../core/limits';
import type { Ledger } from '../store/ledger';
import type { RunPaths } from '../workspace/workspace';

/** What a tool handler may use: the run's folders, its rules, the limits and the backend. */
export interface ToolContext {
  runId: string;
  paths: RunPaths;
  /** The run's rules: its fixture's, or those a repository run derived from its settings. */
  fixture: RunSpec;
  /** The acceptance runner files and expected.json (a host folder); null when the run has none. */
  acceptanceDir: string | null;
  /** A repository run's base commit (its verified change is kept for `branch`); null for a fixture. */
  baseCommit: string | null;
  limits: Limits;
  ledger: Ledger;
  backend: ExecBackend;
  /** Time the call may take, already the smaller of the time left and the per-call limit. */
  timeoutMs: number;
  signal: AbortSignal;
  heartbeat: () => void;
}

/**
 * An action's diff as history carries it: cut at the last line end within `limits.diffBytes`.
 * `whole` is the uncut text when it was cut and is at most `limits.wholeDiffBytes` (the host store
 * keeps it, never history); null when nothing was cut or it is too large to keep.
 */
export function cutDiff(
  diff: string,
  limits: Pick<Limits, 'diffBytes' | 'wholeDiffBytes'>,
): { diff: string; diff_truncated: boolean; whole: string | null } {
  const bytes = Buffer.byteLength(diff);
  if (bytes <= limits.diffBytes) return { diff, diff_truncated: false, whole: null };
  return {
    diff: diff.slice(0, diff.lastIndexOf('\n', limits.diffBytes) + 1),
    diff_truncated: true,
    whole: bytes <= limits.wholeDiffBytes ? diff : null,
  };
}

export { decodeText, splitLines } from '../workspace/text';
