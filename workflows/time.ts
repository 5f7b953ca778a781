/**
 * The one place workflow code reads time. Inside the workflow sandbox `Date` is replaced by the
 * time of the current workflow task, recorded in history, so a replay reads the same value. Every
 * other `Date.now()` in workflows/ is a lint error: a read of time outside this helper is a
 * review finding, not a habit.
 */
export function workflowTime(): number {
  // eslint-disable-next-line no-restricted-properties -- the sandbox's deterministic clock
  return Date.now();
}
