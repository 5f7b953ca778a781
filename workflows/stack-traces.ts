/**
 * How errors made inside a workflow's sandbox get their `stack`.
 *
 * The SDK's workflow thread hooks every promise a workflow makes and takes a stack trace for each
 * (for its `__stack_trace` Query): it makes an Error of the sandbox in its hook and reads its
 * `stack`, whose text `Error.prepareStackTrace` makes, and the SDK's formatter looks each frame up
 * in the bundle's source map. A read-only step of `agentRun` makes a few hundred promises, and that
 * formatting was the largest part of the workflow thread's CPU per step (docs/benchmarks.md).
 * Node asks the sandbox's own `Error.prepareStackTrace` first, so this one answers the hook's
 * Errors (the first frame is the SDK's promise hook) with an empty stack, without formatting a
 * frame: the hook then records nothing, and the stack trace Queries answer with no stacks (nothing
 * of this project asks them). Every other error keeps its stack, in V8's own format: positions in
 * the bundle instead of in the sources.
 *
 * Loaded once per workflow thread before the SDK freezes the sandbox's globals (worker/index.ts,
 * sharedWorkflowModules), so no workflow can change it afterwards. It issues no command: a
 * history replays the same with or without it.
 */

/** Whether `frame` is the SDK's promise hook (`init` in @temporalio/worker's workflow/vm-shared). */
function isPromiseHook(frame: NodeJS.CallSite | undefined): boolean {
  return frame !== undefined && frame.getFunctionName() === 'init' && /[\\/]workflow[\\/]vm-shared\.[jt]s$/.test(frame.getFileName() ?? '');
}

/** V8's own format: the error's first line, then `    at <frame>` per frame; nothing for the promise hook's Errors. */
function sandboxStack(error: Error, frames: NodeJS.CallSite[]): string {
  if (isPromiseHook(frames[0])) return '';
  const head = `${error.name ?? 'Error'}${error.message ? `: ${error.message}` : ''}`;
  return frames.length === 0 ? head : `${head}\n${frames.map((f) => `    at ${String(f)}`).join('\n')}`;
}

Error.prepareStackTrace = sandboxStack;

export {};
