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
  /**
   * Entries a test or acceptance process may add to its writable folders (a file, a folder, a
   * link each): past it the process is stopped and its changes undone, so the undo's walk is
   * bounded whatever the process does (AGENT_REPOSITORY_LIMITS.new_files).
   */
  newFiles: number;
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
  newFiles: 50_000,
};

/**
 * The operator's bounds on what a repository may make the harness read and keep
 * (AGENT_REPOSITORY_LIMITS), each checked while the listing or the content streams, before the
 * work it would cost: a refusal names the field.
 */
export interface RepositoryLimits {
  /** Entries of the base tree (files, links, submodules). */
  files: number;
  /** Bytes of all its files together. */
  bytes: number;
  /** Bytes of one file. */
  blob_bytes: number;
  /** Bytes of one path. */
  path_bytes: number;
  /** Folders one path may be below. */
  depth: number;
  /** Entries a test or setup process may leave in a workspace (Limits.newFiles). */
  new_files: number;
  /** Seconds one git command on a repository may go without a byte of output. */
  idle_s: number;
  /** Seconds one reading of a repository (a reading container's life) may take in all. */
  read_s: number;
}

export const DEFAULT_REPOSITORY_LIMITS: RepositoryLimits = {
  files: 100_000,
  bytes: 1024 * 1024 * 1024,
  blob_bytes: 100 * 1024 * 1024,
  path_bytes: 4096,
  depth: 64,
  new_files: DEFAULT_LIMITS.newFiles,
  idle_s: 5,
  read_s: 600,
};

/** The name a refusal gives a repository limit, as the operator sets it. */
export const limitName = (field: keyof RepositoryLimits) => `AGENT_REPOSITORY_LIMITS.${field}`;
