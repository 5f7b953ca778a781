/**
 * The current run's trace id, as the workflow reads it. The traced bundle's interceptors
 * (workflows/interceptors.ts) register where it comes from when a workflow is created; in the
 * plain bundle, which a worker that exports no traces loads, nothing registers and there is none.
 * Each workflow has its own instance of this module (it is not one of the shared modules of
 * worker/index.ts), so the registration is the workflow's own.
 */
let source: (() => string | null) | null = null;

/** Called by the traced bundle's interceptor factory, once per workflow. */
export function setTraceIdSource(read: () => string | null): void {
  source = read;
}

/** The trace id of the current workflow span (32 hex digits), or null without one. */
export function currentTraceId(): string | null {
  return source === null ? null : source();
}
