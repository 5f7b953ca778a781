/**
 * The embedded default's one worker per state folder: a detached `worker/main.js` recorded in
 * `<state>/worker.json` with the build it runs and digests of the provider variables it was
 * started with. A command that needs a worker reuses it only when both match its own; otherwise
 * it replaces it, so a worker started from another shell or before a rebuild never answers for a
 * new run. A worker of the same build is stopped first (SIGTERM, which drains in-flight work); a
 * worker of another build is left running beside the new one, which makes its own version the
 * deployment's current one: the old worker serves only the runs pinned to its version and exits
 * once they have ended (worker/main.ts, docs/versioning.md). Commands never run a second worker of
 * the same build beside it on the same queue.
 *
 * Hazard: two commands may ensure the worker at once; a lock file serialises them, and a lock
 * left by a dead command is taken over.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { WORKER_NODE_ARGS, workerProcessEnv } from './worker-launch';
import { closeSync, existsSync, openSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { sha256 } from './digest';
import { readProvidersFile } from './endpoints';
import { buildId } from './build';
import { writeFileAtomic } from './files';
import { identityOf, processAlive, processEnded, type ProcessIdentity } from './processes';
import { readCredential, readSetting, VARIABLES, type Settings } from './settings';

export interface WorkerRecord extends ProcessIdentity {
  build: string;
  /** Each variable the providers file names: a digest of the value the worker got, or null when unset. */
  provider_env: Record<string, string | null>;
  task_queue: string;
  /** A digest of its telemetry settings: where it exports traces (and with which headers) and serves metrics. */
  telemetry: string;
  /** Whether it runs commands on the local backend, and its budgets' maximums, as a digest (absent from older records). */
  operator?: string;
}

export const WORKER_RECORD = 'worker.json';
/** Tells worker/main.js it is the background worker of its state folder (its `backgroundWorker` setting). */
export const BACKGROUND_MARK = VARIABLES.backgroundWorker.name;

/** Digests (never values) of the variables the operator's endpoints name, as `env` has them (default: this process's). */
export function providerEnv(settings: Settings, env?: NodeJS.ProcessEnv): Record<string, string | null> {
  let names: string[] = [];
  try {
    names = readProvidersFile(settings.providersFile).endpoints.map((e) => e.api_key_env);
  } catch {
    // An unreadable file names nothing here; the run that needs it reports the error.
  }
  return Object.fromEntries(
    [...new Set(names)].sort().map((n) => {
      const value = readCredential(n, env);
      return [n, value !== undefined ? sha256(`agent-provider-env\0${value}`).slice(0, 16) : null];
    }),
  );
}

export function readWorkerRecord(stateDir: string): WorkerRecord | null {
  try {
    return JSON.parse(readFileSync(join(stateDir, WORKER_RECORD), 'utf8')) as WorkerRecord;
  } catch {
    return null;
  }
}

/** The recorded background worker, if it is still that process. */
export function liveWorker(stateDir: string): WorkerRecord | null {
  const record = readWorkerRecord(stateDir);
  return record !== null && processAlive(record) ? record : null;
}

/** What a worker started now from this environment would record. */
function expectedRecord(settings: Settings, env?: NodeJS.ProcessEnv): Omit<WorkerRecord, 'pid' | 'start'> {
  return {
    build: buildId(),
    provider_env: providerEnv(settings, env),
    task_queue: settings.taskQueue,
    telemetry: telemetryDigest(settings),
    operator:
      env === undefined
        ? operatorDigest(settings)
        : // As the background worker started from `env` reads them: it allows local runs unless AGENT_ALLOW_LOCAL says otherwise.
          operatorDigest({
            allowLocal: readSetting('allowLocal', { ...env, [BACKGROUND_MARK]: '1' }),
            maxBudgets: readSetting('maxBudgets', env),
          }),
  };
}

/** The operator's decisions a worker takes: whether it runs local commands, and the budgets' maximums. */
function operatorDigest(settings: Pick<Settings, 'allowLocal' | 'maxBudgets'>): string {
  return sha256(`agent-operator\0${JSON.stringify([settings.allowLocal, settings.maxBudgets])}`).slice(0, 16);
}

/** The telemetry settings a worker was started with, as a digest (the export headers may hold a key). */
function telemetryDigest(settings: Settings): string {
  return sha256(`agent-telemetry\0${JSON.stringify([settings.otlpEndpoint, settings.otlpHeaders, settings.metricsAddress])}`).slice(0, 16);
}

/** Called by the background worker once it polls: it is now the state folder's worker. */
export function recordSelf(settings: Settings): WorkerRecord {
  const record: WorkerRecord = { ...identityOf(), ...expectedRecord(settings) };
  writeFileAtomic(join(settings.stateDir, WORKER_RECORD), JSON.stringify(record));
  return record;
}

export interface EnsuredWorker {
  record: WorkerRecord;
  action: 'reused' | 'started' | 'replaced';
  /** Why the old worker was replaced. */
  why: string | null;
}

const same = (a: Record<string, string | null>, b: Record<string, string | null>) => JSON.stringify(a) === JSON.stringify(b);

/** `env`: the environment the worker is started with (default: this process's, passed on whole). */
export async function ensureBackgroundWorker(settings: Settings, env: NodeJS.ProcessEnv = process.env): Promise<EnsuredWorker> {
  const release = await lock(join(settings.stateDir, 'worker.lock'));
  try {
    const wanted = expectedRecord(settings, env);
    const current = liveWorker(settings.stateDir);
    let why: string | null = null;
    if (current !== null) {
      if (
        current.build === wanted.build &&
        same(current.provider_env, wanted.provider_env) &&
        current.task_queue === wanted.task_queue &&
        current.telemetry === wanted.telemetry &&
        current.operator === wanted.operator
      ) {
        return { record: current, action: 'reused', why: null };
      }
      why =
        current.build !== wanted.build
          ? `it runs build ${current.build}, this is ${wanted.build}`
          : current.task_queue !== wanted.task_queue
            ? `it polls ${current.task_queue}`
            : current.telemetry !== wanted.telemetry
              ? 'its trace export or metrics settings differ from this shell'
              : current.operator !== wanted.operator
                ? 'its local-run or budget settings (AGENT_ALLOW_LOCAL, AGENT_MAX_BUDGETS) differ from this shell'
                : 'its provider variables differ from this shell';
      // Another build's runs are pinned to its version: it drains by itself once a new version is current.
      if (current.build === wanted.build) await stopWorker(current);
    }
    const log = openSync(join(settings.stateDir, 'worker.log'), 'a');
    let child: ChildProcess;
    try {
      child = spawn(process.execPath, [...WORKER_NODE_ARGS, join(__dirname, '..', 'worker', 'main.js')], {
        detached: true,
        stdio: ['ignore', log, log],
        env: workerProcessEnv({ ...env, [BACKGROUND_MARK]: '1' }),
      });
      child.unref();
    } finally {
      closeSync(log);
    }
    // The worker records itself once it polls: what it runs, as it sees it.
    const record = await waitFor(`the background worker to start (see worker.log in ${settings.stateDir})`, 60_000, () => {
      if (child.exitCode !== null)
        throw new Error(`the background worker exited with code ${child.exitCode}; see worker.log in ${settings.stateDir}`);
      const r = readWorkerRecord(settings.stateDir);
      return r !== null && r.pid === child.pid ? r : null;
    });
    return { record, action: current === null ? 'started' : 'replaced', why };
  } finally {
    release();
  }
}

/** Stops a worker: SIGTERM lets it finish its in-flight tasks; SIGKILL after 60 s. */
export async function stopWorker(who: ProcessIdentity): Promise<void> {
  if (!processAlive(who)) return;
  process.kill(who.pid, 'SIGTERM');
  if (await processEnded(who, 60_000)) return;
  process.kill(who.pid, 'SIGKILL');
  await processEnded(who, 10_000);
}

async function waitFor<T>(what: string, timeoutMs: number, probe: () => T | null): Promise<T> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const value = probe();
    if (value !== null) return value;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** An exclusive lock file holding its owner's identity; a dead owner's lock is taken over. */
async function lock(file: string): Promise<() => void> {
  const until = Date.now() + 120_000;
  for (;;) {
    try {
      const fd = openSync(file, 'wx');
      writeFileSync(fd, JSON.stringify(identityOf()));
      closeSync(fd);
      return () => rmSync(file, { force: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    let owner: ProcessIdentity | null = null;
    try {
      owner = JSON.parse(readFileSync(file, 'utf8')) as ProcessIdentity;
    } catch {
      // Not filled yet (look again), or left empty by an owner that died at once (taken over after 10 s).
      const st = statSync(file, { throwIfNoEntry: false });
      if (st && Date.now() - st.mtimeMs > 10_000) rmSync(file, { force: true });
    }
    if (owner !== null && !processAlive(owner) && existsSync(file)) rmSync(file, { force: true });
    if (Date.now() > until) throw new Error(`another command holds ${file} for more than 2 minutes`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
