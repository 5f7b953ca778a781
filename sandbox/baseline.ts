/**
 * The candidate tests at the untouched base: run on a fresh copy of the run's base tree (its
 * baseline copy, with a setup's products and a task's test patch), once per tree and command on a
 * host. Their outcomes are kept in the host store under a key of the tree's digest, the test
 * command, the backend and image, and the test patch, so a batch's epochs, a rerun and a fork of
 * the same base pay once.
 *
 * Only usable outcomes are kept (the report was read: passed, failed or no tests); a timeout, a
 * cancellation or an unusable report is the verifier's `counts` verdict and is tried again next
 * time. Two runs of one worker asking at once share one test run.
 */
import type { BaseTests, OutcomeCounts, TestCase } from '../core/contracts';
import { usable } from '../core/verdict';
import { digestJson } from '../host/digest';
import { offThread } from '../workspace/thread';
import type { RunPaths } from '../workspace/workspace';
import { leftCopies } from '../workspace/verification-tree';
import { runTestsIn, unusableRun, type TestRunOptions } from './test-runner';

/** What the host store keeps of a base's outcomes. */
export interface StoredBaseline {
  status: string;
  outcomes: OutcomeCounts;
  tests_ref: string;
}

/** The host store's side (activities/verification.ts wires it to store/store.ts). */
export interface BaselineCache {
  get(key: string): StoredBaseline | null;
  put(key: string, value: StoredBaseline): void;
  keepTests(tests: TestCase[]): string;
  tests(ref: string): TestCase[];
}

/** The base's outcomes with every test. */
export type BaseOutcomes = BaseTests & { tests: TestCase[]; detail?: string };

/** Bump when what a key stands for changes (how tests are run or named). */
const KEY_VERSION = 1;

export async function baselineKey(o: {
  paths: RunPaths;
  tests: TestRunOptions['fixture']['tests'];
  backend: string;
  image: string | null;
  testPatch: string | null;
}): Promise<string> {
  return digestJson({
    v: KEY_VERSION,
    tree: await offThread('baselineDigest', [o.paths], { key: o.paths.workspace }),
    tests: o.tests,
    backend: o.backend,
    image: o.image,
    test_patch: o.testPatch,
  });
}

/**
 * The base runs under way, by the cache (the host store) their outcomes go to: a run waits for
 * another's only when both keep results in one store, since what it gets back is a reference into
 * that store. (A process may hold several workers over several state folders: the tests' do.)
 */
const underWay = new WeakMap<BaselineCache, Map<string, Promise<StoredBaseline | null>>>();
function inflightOf(cache: BaselineCache): Map<string, Promise<StoredBaseline | null>> {
  let runs = underWay.get(cache);
  if (runs === undefined) underWay.set(cache, (runs = new Map()));
  return runs;
}

/** The base's outcomes: from the cache, from a run under way for the same host store, or run now. */
export async function baseOutcomes(
  opts: TestRunOptions & { paths: RunPaths; cache: BaselineCache; image: string | null; testPatch: string | null },
): Promise<BaseOutcomes> {
  const key = await baselineKey({
    paths: opts.paths,
    tests: opts.fixture.tests,
    backend: opts.backend.name,
    image: opts.image,
    testPatch: opts.testPatch,
  });
  const found = (stored: StoredBaseline, cached: boolean): BaseOutcomes => ({
    status: stored.status,
    outcomes: stored.outcomes,
    tests_ref: stored.tests_ref,
    cached,
    tests: opts.cache.tests(stored.tests_ref),
  });
  const kept = opts.cache.get(key);
  if (kept !== null) return found(kept, true);
  const inflight = inflightOf(opts.cache);
  const running = inflight.get(key);
  if (running !== undefined) {
    // Another run of this host store runs the same tests: its heartbeat is not ours.
    const beat = setInterval(() => opts.onProgress?.(), 1000);
    const shared = await running.finally(() => clearInterval(beat));
    if (shared !== null) return found(shared, true);
  }
  let ran: BaseOutcomes | null = null;
  const run = (async (): Promise<StoredBaseline | null> => {
    ran = await runAtBase(opts);
    if (!usable(ran.status) || opts.signal.aborted) return null;
    const stored = { status: ran.status, outcomes: ran.outcomes, tests_ref: ran.tests_ref! };
    opts.cache.put(key, stored);
    return stored;
  })();
  inflight.set(key, run);
  try {
    await run;
  } finally {
    inflight.delete(key);
  }
  return ran!;
}

async function runAtBase(
  opts: TestRunOptions & { paths: RunPaths; cache: BaselineCache; testPatch: string | null },
): Promise<BaseOutcomes> {
  const call = { key: opts.paths.workspace, onProgress: opts.onProgress };
  await offThread('remove', [leftCopies(opts.paths)], call);
  const copy = await offThread('copyForTests', [opts.paths, opts.paths.baseline, 'base'], call);
  try {
    const patchError = await offThread('prepareCopy', [copy.tree, opts.paths.baseline, [], opts.testPatch], call);
    const data = patchError === null ? await runTestsIn(opts, copy.tree, copy.control) : unusableRun(patchError);
    const tests = data.tests ?? [];
    return {
      status: data.status,
      outcomes: data.outcomes,
      tests_ref: usable(data.status) ? opts.cache.keepTests(tests) : null,
      cached: false,
      tests,
      ...(data.detail ? { detail: data.detail } : {}),
    };
  } finally {
    await offThread('remove', [copy.dir], call);
  }
}
