/**
 * The traced bundle's OpenTelemetry context manager, over one AsyncLocalStorage for the whole
 * workflow thread (this module is preloaded: one instance serves every workflow of the thread).
 *
 * Why: on Node 20, every enabled AsyncLocalStorage of a thread stamps a property on every promise
 * made in that thread, whichever workflow made it, and the promise hook walks them all. The
 * interceptors' own context manager makes one storage per workflow, so with C runs in the cache
 * each promise carried about C such properties, and the cache held C times as many promises: a
 * cost that grows with the square of the cache (docs/benchmarks.md, "The hot path, fifth
 * round"). One shared storage costs each promise one property.
 *
 * Sharing is safe: a context is only ever set by `with`, for the async work it starts, and a
 * workflow's activation begins outside any `with`; so a workflow reads either a context its own
 * code set or the root one, as with a storage of its own. Contexts carry spans, which make no
 * command.
 */
import type { Context, ContextManager } from '@opentelemetry/api';
import * as semanticConventions from '@opentelemetry/semantic-conventions';

/**
 * OpenTelemetry's semantic conventions, constants only, which the SDK's tracer and its resource
 * reach in each workflow: held here, so that the thread builds them once rather than once per
 * workflow (about 70 KiB each, docs/benchmarks.md, "tenth round").
 */
export const SEMANTIC_CONVENTIONS = semanticConventions;

/** What is used of an AsyncLocalStorage. */
interface Storage {
  getStore(): Context | undefined;
  run<R, A extends unknown[]>(store: Context, fn: (...args: A) => R, ...args: A): R;
}

/** The sandbox's AsyncLocalStorage (the SDK injects it); made here at preload, before any workflow. */
const storage = new (globalThis as unknown as { AsyncLocalStorage: new () => Storage }).AsyncLocalStorage();

/** OpenTelemetry's ContextManager over the thread's one storage; `root` is the API's ROOT_CONTEXT. */
export class SharedContextManager implements ContextManager {
  constructor(private readonly root: Context) {}

  active(): Context {
    return storage.getStore() ?? this.root;
  }

  with<A extends unknown[], F extends (...args: A) => ReturnType<F>>(
    context: Context,
    fn: F,
    thisArg?: ThisParameterType<F>,
    ...args: A
  ): ReturnType<F> {
    // As OpenTelemetry's own managers: bound unless thisArg is null or undefined.
    const call = thisArg == null ? fn : (fn.bind(thisArg) as F);
    return storage.run(context, call, ...args);
  }

  bind<T>(context: Context, target: T): T {
    if (typeof target !== 'function') throw new TypeError(`only a function can be bound to a context, not ${typeof target}`);
    const fn = target as unknown as (this: unknown, ...args: unknown[]) => unknown;
    const run = (self: unknown, args: unknown[]) => this.with(context, () => fn.apply(self, args));
    return function (this: unknown, ...args: unknown[]) {
      return run(this, args);
    } as unknown as T;
  }

  enable(): this {
    return this;
  }

  /** The storage is the thread's, not this workflow's: it stays as it is. */
  disable(): this {
    return this;
  }
}
