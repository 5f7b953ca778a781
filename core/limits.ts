/** The host's size limits of tools, tests, diffs and workspaces: safe defaults, lowered by tests. Pure data. */
export interface Limits {
  /** Largest file read_file, search or apply_patch will open. */
  maxFileBytes: number;
  /** Cap on the text one read_file returns. */
  readBytes: number;
  /** Cap on the serialised matches one search returns. */
  searchBytes: number;
  /** Cap on a unified diff (show_diff, and each pending approval's diff). */
  diffBytes: number;
  /**
   * Largest whole diff the host store keeps for an action whose diff was cut at `diffBytes`, so
   * the console can show it whole before Approve (a larger one is approved from the command line).
   */
  wholeDiffBytes: number;
  /** Cap on the `new` text of one apply_patch. */
  patchBytes: number;
  /** Bytes kept of each of stdout and stderr of a test or acceptance process. */
  execOutputBytes: number;
  /** Bytes of output shown in run_tests' output_tail. */
  outputTailBytes: number;
  /** Largest JUnit report accepted; a larger one counts as unusable output. */
  reportBytes: number;
  /**
   * Largest a run's workspace may grow: the sum of its regular files' sizes. A write that would
   * take it over is refused (`too_large`), and a test or acceptance process that takes its
   * workspace and report folder over it is stopped; a workspace already larger (its base tree)
   * may not grow. So one run cannot fill the host's disk for the others.
   */
  workspaceBytes: number;
}

export const DEFAULT_LIMITS: Limits = {
  maxFileBytes: 1024 * 1024,
  readBytes: 64 * 1024,
  searchBytes: 32 * 1024,
  diffBytes: 32 * 1024,
  wholeDiffBytes: 8 * 1024 * 1024,
  patchBytes: 256 * 1024,
  execOutputBytes: 1024 * 1024,
  outputTailBytes: 4 * 1024,
  reportBytes: 8 * 1024 * 1024,
  workspaceBytes: 2 * 1024 * 1024 * 1024,
};
