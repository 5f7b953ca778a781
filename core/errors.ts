/**
 * The closed set of tool error codes (SPEC section 3), with what the caller should do next.
 * `binary_file` is this project's addition: read_file on a file that is not UTF-8 text; the
 * sub-run codes (`unknown_task`, `task_not_accepting`, `merge_conflict`) are SPEC section 12's.
 */
export const ERROR_CODES = {
  unknown_tool: 'Use one of the listed tools.',
  invalid_fields: 'Fix the arguments: shape, type, range or an unknown field.',
  path_denied: 'Stop going there: the path leaves the workspace or crosses a link.',
  write_denied: 'Do not modify this path: it is protected or may not be created.',
  not_found: 'Check the path: the file or folder does not exist.',
  stale_version: 'Read the file again, then propose again with its current version.',
  no_match: 'Read the file again: the old text was not found.',
  non_unique_match: 'Include more surrounding context in old: it occurs more than once.',
  no_op: 'Propose a real change: old and new are identical.',
  too_large: 'Narrow the request: the file or result is over the size cap.',
  binary_file: 'Read a text file: this one is not UTF-8 text.',
  tests_failed: 'Fix the code: tests ran and some failed.',
  tests_incomplete: 'Fix the cause: no tests were discovered, the run timed out, was cancelled or its output was unusable.',
  approval_rejected: 'Propose something else: a human or policy rejected this action.',
  approval_stale: 'Read again, then propose again: the workspace changed while the approval was pending.',
  interrupted: 'The user interrupted this turn before the call ran; follow their next message.',
  unknown_task: "Copy a task_id from the roster or from dispatch_task's result: this one names no task of this run.",
  task_not_accepting: 'This task cannot take a message now (see its status); dispatch a new task or wait for it to end.',
  merge_conflict: 'Your files changed underneath the task: read them, then merge by hand with apply_patch or dispatch again.',
} as const;

export type ErrorCode = keyof typeof ERROR_CODES;

export function isErrorCode(value: string): value is ErrorCode {
  return Object.prototype.hasOwnProperty.call(ERROR_CODES, value);
}
