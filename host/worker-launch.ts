/**
 * How a worker process is started, by the command line's background worker, `npm run worker`,
 * the bench and the tests alike: node's options and the environment glibc reads at start. Both
 * bound what a burst of runs leaves in the process once it is over (docs/benchmarks.md, parked
 * runs): V8 lets each thread's young generation grow to 16 MiB per semi-space (32 MiB kept per
 * thread after the burst), and glibc gives each busy thread an arena of its own (up to 8 per
 * core) whose freed memory it keeps. An operator's own MALLOC_ARENA_MAX wins. package.json's
 * `worker` script says the same.
 */

/** V8's young generation, in MiB per semi-space, of every thread of a worker process. */
export const WORKER_SEMI_SPACE_MB = 4;

/** node's options before `worker/main.js`. */
export const WORKER_NODE_ARGS = [`--max-semi-space-size=${WORKER_SEMI_SPACE_MB}`];

/** The worker's environment: `env` with glibc's arenas bounded unless it says otherwise. */
export function workerProcessEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return { MALLOC_ARENA_MAX: '2', ...env };
}
