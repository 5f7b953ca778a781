/**
 * The activities of agentRun, built by a factory so the worker wires real dependencies (ledger,
 * backends, state folder) and tests can pass their own real ones.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { basename, resolve, join } from 'node:path';
import { Context } from '@temporalio/activity';
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import { fixtureSchema, type Fixture, type IsolationEvidence, type ParsedRunInput, type PreparedAction, type ToolResult, type VerifierFindings } from '../core/contracts';
import type { ApplyPatchArgs, ValidCall } from '../core/tools';
import { BackendUnavailableError, type ExecBackend } from './backends/types';
import type { HarnessConfig } from './config';
import { loadReplay, replayDecide, ReplayFileError, type DecideInput, type DecideResult } from './decisions';
import type { Ledger } from './ledger';
import { preparePatch as prepare, writePatch as write, type PrepareOutcome, type WriteOutcome } from './tools/apply_patch';
import type { ToolContext } from './tools/context';
import { readFile } from './tools/read_file';
import { runTests } from './tools/run_tests';
import { search } from './tools/search';
import { showDiff, workspaceDiff } from './tools/show_diff';
import { verify as runVerifier } from './verifier';
import { prepareWorkspace as prepareRunWorkspace, runPaths, type PreparedWorkspace } from './workspace';

export interface ActivityDeps {
  config: HarnessConfig;
  ledger: Ledger;
  backends: Partial<Record<'local' | 'docker', ExecBackend>>;
  /** The docker backend's isolation evidence (measured once per worker, then reused). */
  isolation?: () => Promise<IsolationEvidence>;
}

/** What the workflow passes to every run-scoped activity. */
export interface RunRef {
  run_id: string;
  fixture: Fixture;
  /** Fixture folder as given in the run's input: absolute, or relative to the worker's working directory. */
  fixture_dir: string;
  backend: 'local' | 'docker';
}

export type LoadRunResult =
  | { ok: true; fixture: Fixture; fixture_dir: string; replay: string | null }
  | { ok: false; reason: 'invalid_input' | 'replay_untrusted'; detail: string };

function infrastructure(err: unknown): never {
  if (err instanceof BackendUnavailableError) {
    throw ApplicationFailure.create({ type: 'InfrastructureError', message: err.message, nonRetryable: true, details: [err.detail] });
  }
  throw err;
}

export function createActivities(deps: ActivityDeps) {
  const { config, ledger } = deps;

  const backendFor = (name: RunRef['backend']): ExecBackend => {
    const backend = deps.backends[name];
    if (!backend) {
      throw ApplicationFailure.create({ type: 'InfrastructureError', message: `backend ${name} is not configured on this worker`, nonRetryable: true, details: ['runtime_unavailable'] });
    }
    return backend;
  };

  const toolContext = (ref: RunRef, timeoutMs: number): ToolContext => {
    const ctx = Context.current();
    return {
      runId: ref.run_id,
      paths: runPaths(config.stateDir, ref.run_id),
      fixture: ref.fixture,
      fixtureDir: resolve(ref.fixture_dir),
      limits: config.limits,
      ledger,
      backend: backendFor(ref.backend),
      timeoutMs,
      signal: ctx.cancellationSignal,
      heartbeat: () => ctx.heartbeat(),
    };
  };

  return {
    /** Reads and checks the fixture and the decision source; nothing is created yet. */
    async loadRun(input: ParsedRunInput): Promise<LoadRunResult> {
      const fixtureDir = resolve(input.fixture);
      const source = input.source;
      const fixtureFile = join(fixtureDir, 'fixture.json');
      if (!existsSync(fixtureFile)) return { ok: false, reason: 'invalid_input', detail: `no fixture.json in ${input.fixture}` };
      let raw: unknown;
      try {
        raw = JSON.parse(readFileSync(fixtureFile, 'utf8'));
      } catch (err) {
        return { ok: false, reason: 'invalid_input', detail: `fixture.json is not JSON: ${(err as Error).message}` };
      }
      const parsed = fixtureSchema.safeParse(raw);
      if (!parsed.success) {
        return { ok: false, reason: 'invalid_input', detail: `fixture.json: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}` };
      }
      for (const part of ['repo', 'acceptance']) {
        if (!existsSync(join(fixtureDir, part)) || !statSync(join(fixtureDir, part)).isDirectory()) {
          return { ok: false, reason: 'invalid_input', detail: `fixture has no ${part}/ folder` };
        }
      }
      if (!existsSync(join(fixtureDir, 'acceptance', 'expected.json'))) return { ok: false, reason: 'invalid_input', detail: 'fixture has no acceptance/expected.json' };
      if (source.kind !== 'replay') return { ok: true, fixture: parsed.data, fixture_dir: input.fixture, replay: null };
      try {
        loadReplay(source.path);
      } catch (err) {
        if (err instanceof ReplayFileError) return { ok: false, reason: 'invalid_input', detail: err.message };
        throw err;
      }
      // A replay can create test files that the test command then executes on the host.
      if (input.backend === 'local' && !source.trusted) {
        return { ok: false, reason: 'replay_untrusted', detail: 'the local backend runs only replays the operator trusts (--trust-replay)' };
      }
      return { ok: true, fixture: parsed.data, fixture_dir: input.fixture, replay: basename(source.path).replace(/\.json$/, '') };
    },

    /** The isolation evidence of the docker backend; never throws for a missing engine. */
    async checkIsolation(): Promise<IsolationEvidence> {
      if (!deps.backends.docker || !deps.isolation) {
        return { verified: false, checks: {}, image_id: null, settings: null, reason_detail: 'runtime_unavailable' };
      }
      return deps.isolation();
    },

    async prepareWorkspace(ref: { run_id: string; fixture_dir: string }): Promise<PreparedWorkspace> {
      return prepareRunWorkspace(runPaths(config.stateDir, ref.run_id), join(resolve(ref.fixture_dir), 'repo'));
    },

    async decide(input: DecideInput): Promise<DecideResult> {
      if (input.source.kind !== 'replay') {
        throw ApplicationFailure.create({ type: 'ProviderUnavailable', message: `live provider ${input.source.provider} is not available in this version`, nonRetryable: true });
      }
      try {
        return replayDecide(input.source.path, input.history);
      } catch (err) {
        if (err instanceof ReplayFileError) throw ApplicationFailure.create({ type: 'ReplayFileError', message: err.message, nonRetryable: true });
        throw err;
      }
    },

    /** The read-only tools: read_file, search, show_diff and run_tests. */
    async executeTool(ref: RunRef, call: ValidCall, timeoutMs: number): Promise<ToolResult> {
      const ctx = toolContext(ref, timeoutMs);
      switch (call.name) {
        case 'read_file':
          return readFile(ctx, call.call_id, call.arguments);
        case 'search':
          return search(ctx, call.call_id, call.arguments);
        case 'show_diff':
          return showDiff(ctx, call.call_id);
        case 'run_tests': {
          const result = await runTests(ctx, call.call_id).catch(infrastructure);
          // A cancelled activity must say so, or the workflow would take the partial result.
          if (ctx.signal.aborted) throw new CancelledFailure('run_tests was cancelled');
          return result;
        }
        case 'apply_patch':
          throw ApplicationFailure.nonRetryable('apply_patch goes through preparePatch and writePatch', 'ProtocolError');
      }
    },

    async preparePatch(ref: RunRef, callId: string, args: ApplyPatchArgs): Promise<PrepareOutcome> {
      return prepare(toolContext(ref, 0), callId, args);
    },

    async writePatch(ref: RunRef, action: PreparedAction, args: ApplyPatchArgs): Promise<WriteOutcome> {
      return write(toolContext(ref, 0), action, args);
    },

    async verify(ref: RunRef, timeoutMs: number): Promise<VerifierFindings> {
      const ctx = toolContext(ref, timeoutMs);
      const findings = await runVerifier({ ...ctx, paths: ctx.paths, onProgress: ctx.heartbeat }).catch(infrastructure);
      if (ctx.signal.aborted) throw new CancelledFailure('verification was cancelled');
      return findings;
    },

    /** Changed paths of a run that ended before verification (empty when no workspace exists). */
    async diffPaths(ref: { run_id: string }): Promise<string[]> {
      const paths = runPaths(config.stateDir, ref.run_id);
      if (!existsSync(join(paths.control, 'prepared.json'))) return [];
      return workspaceDiff(paths, 0).paths;
    },
  };
}

export type Activities = ReturnType<typeof createActivities>;
