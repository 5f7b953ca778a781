/**
 * An execution backend runs one candidate-test or acceptance process and reports
 * exactly what happened. The verifier and the run_tests tool are backend-agnostic:
 * they only see an ExecResult.
 *
 * Placeholders in argv are replaced by the backend with where the mount is visible
 * to the process: `{out}` (a writable folder for structured reports such as JUnit
 * XML) and `{acceptance}` (the read-only acceptance runner files).
 */
export interface ExecSpec {
  argv: string[];
  /** Host path of the candidate workspace; the process runs with it as working directory. */
  workspaceDir: string;
  /** Mount the workspace read-only (acceptance) or read-write (candidate tests). */
  workspaceReadOnly: boolean;
  /** Host folder the process may write reports into; visible as `{out}`. */
  outDir: string;
  /** Host folder visible read-only as `{acceptance}`, when the command needs it. */
  acceptanceDir?: string;
  timeoutMs: number;
  /** Bytes kept of stdout and of stderr each; output beyond is drained and dropped. */
  outputCapBytes: number;
  /** Aborted when the activity is cancelled; the whole process tree must stop. */
  signal: AbortSignal;
  /** Called while the process runs, so the activity can heartbeat. */
  onProgress?: () => void;
}

export interface ExecResult {
  /** Exit code, or null when the process was stopped (timeout, cancellation) or killed by a signal. */
  exitCode: number | null;
  timedOut: boolean;
  cancelled: boolean;
  stdout: string;
  stderr: string;
  /** True when stdout or stderr exceeded outputCapBytes and was cut. */
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
}

/** Thrown when the backend itself cannot run anything (missing runtime, engine down). */
export class BackendUnavailableError extends Error {
  constructor(
    message: string,
    readonly detail: string,
  ) {
    super(message);
    this.name = 'BackendUnavailableError';
  }
}

export interface ExecBackend {
  readonly name: 'local' | 'docker';
  exec(spec: ExecSpec): Promise<ExecResult>;
}
