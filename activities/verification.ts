/** The host verifier as an activity, the base's test outcomes, and the changed paths of a run that ended before verification. */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { CancelledFailure } from '@temporalio/common';
import type { RunRef } from '../core/activities';
import type { BaseTests, Decision, TestCase, VerifierFindings } from '../core/contracts';
import { baseOutcomes, type BaselineCache, type StoredBaseline } from '../sandbox/baseline';
import { verify as runVerifier, type TaskVerdictInput } from '../sandbox/verifier';
import { offThread } from '../workspace/thread';
import { infrastructure, type Kit } from './kit';

export function verificationActivities(kit: Kit) {
  const cache: BaselineCache = {
    get: (key) => kit.store.baseline<StoredBaseline>(key),
    put: (key, value) => kit.store.keepBaseline(key, value),
    keepTests: (tests) => kit.store.put('tests', tests),
    tests: (ref) => kit.store.get<TestCase[]>(ref),
  };
  /** The task's own verdict, from the host store where loadRun kept it. */
  const taskOf = (ref: RunRef): TaskVerdictInput => {
    const v = ref.fixture.verdict_ref;
    if (!v) return { tests_may_change: false, test_patch: null };
    const named = v.tests_ref ? kit.store.get<{ fail_to_pass?: string[]; pass_to_pass?: string[] }>(v.tests_ref) : {};
    return { ...named, tests_may_change: v.tests_may_change, test_patch: v.test_patch ? kit.store.get<string>(v.test_patch) : null };
  };
  const cancelled = (signal: AbortSignal, what: string) => {
    if (signal.aborted) throw new CancelledFailure(`${what} was cancelled`);
  };

  return {
    /**
     * The verifier's findings, for history; a repository run's verified change is kept in the
     * control folder for `branch` and `patch` (each file checked against the digest the verifier
     * saw as it is copied), with the text of the `final` it judged, never returned.
     */
    async verify(ref: RunRef, timeoutMs: number, finalRef?: string): Promise<VerifierFindings> {
      const ctx = kit.stepContext(ref, timeoutMs);
      const { findings, change } = await runVerifier({
        ...ctx,
        onProgress: ctx.heartbeat,
        hiddenAcceptance: ref.hidden_acceptance !== false,
        cache,
        image: ref.image ?? null,
        task: taskOf(ref),
        allowTestConfig: ref.allow_test_config_change === true,
      }).catch(infrastructure);
      cancelled(ctx.signal, 'verification');
      if (change !== null) {
        // A verify scheduled by a build before `finalRef` has none (nor a store that lost it): its commit message is the default one.
        const final = finalRef !== undefined && kit.store.has(finalRef) ? kit.store.get<Decision>(finalRef) : null;
        const kept = { ...change, summary: final?.kind === 'final' ? final.text : '' };
        await offThread('keepChange', [ctx.paths, kept], { key: ctx.paths.workspace, onProgress: ctx.heartbeat });
      }
      return findings;
    },

    async baselineTests(ref: RunRef, timeoutMs: number): Promise<BaseTests> {
      const ctx = kit.stepContext(ref, timeoutMs);
      const { tests: _tests, ...base } = await baseOutcomes({
        ...ctx,
        onProgress: ctx.heartbeat,
        cache,
        image: ref.image ?? null,
        testPatch: taskOf(ref).test_patch,
      }).catch(infrastructure);
      cancelled(ctx.signal, 'the base run of the tests');
      return base;
    },

    /** Changed paths of a run that ended before verification (empty when no workspace exists). */
    async diffPaths(ref: { run_id: string }): Promise<string[]> {
      const paths = kit.paths(ref.run_id);
      if (!existsSync(join(paths.control, 'prepared.json'))) return [];
      return (await offThread('workspaceDiff', [paths, 0, 0], { key: paths.workspace })).paths;
    },
  };
}
