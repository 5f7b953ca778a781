/**
 * Worker Versioning (docs/versioning.md): every worker polls as one version of the deployment the
 * settings name (`AGENT_DEPLOYMENT_NAME`), its build id the build's digest (host/build.ts), and
 * every workflow it runs is PINNED to that version. A worker makes its version the deployment's
 * current one once the server has seen it poll each of its task queues, so new runs go to the
 * newest worker started; a worker whose version is no longer current keeps serving the runs
 * pinned to it, and exits once the server reports the version drained.
 *
 * Hazard: the server registers a version's task queues when its pollers arrive, asynchronously;
 * a version made current before that would route its queues' new tasks nowhere, and a task sent
 * to a queue the version does not list yet waits in the unversioned backlog. `becomeCurrent`
 * therefore waits for the version to list every queue this worker polls.
 *
 * Hazard: a worker lives through its server being away (killed, restarting, its link cut) however
 * long that lasts, and so does its wait to become current: the server away is waited out, and the
 * wait for the listing starts again once it answers. A worker that ended there would leave its
 * runs without a worker until someone started another.
 */
import { temporal } from '@temporalio/proto';
import type { NativeConnection, WorkerDeploymentOptions } from '@temporalio/worker';
import type { WorkerDeploymentVersion } from '@temporalio/common';
import { faultPoint } from '../host/faults';

const VersionStatus = temporal.api.enums.v1.WorkerDeploymentVersionStatus;
const QueueType = temporal.api.enums.v1.TaskQueueType;

/**
 * gRPC codes that a worker's polls retry for as long as they come (the SDK core's rule for a task
 * poll): a cut or timed-out call (CANCELLED, DEADLINE_EXCEEDED), the server away (UNAVAILABLE), a
 * transport error (UNKNOWN, INTERNAL), the server busy (RESOURCE_EXHAUSTED, ABORTED), OUT_OF_RANGE
 * and DATA_LOSS. The wait to become current retries the same, so a worker lives through whatever
 * its polls live through.
 */
const POLLS_RETRY = new Set([1, 2, 4, 8, 10, 11, 13, 14, 15]);
const retried = (err: unknown) => POLLS_RETRY.has((err as { code?: unknown }).code as number);

/** The options of every Temporal worker of this build: its version, PINNED unless a workflow says otherwise. */
export function deploymentOptions(version: WorkerDeploymentVersion): WorkerDeploymentOptions {
  return { version, useWorkerVersioning: true, defaultVersioningBehavior: 'PINNED' };
}

/** `name.build`, as the server and `temporal worker deployment` name a version. */
export const versionName = (v: WorkerDeploymentVersion): string => `${v.deploymentName}.${v.buildId}`;

/** The queues a worker polls, by kind: workflow tasks on one, activity tasks on the others. */
export interface PolledQueues {
  workflow: string[];
  activity: string[];
}

export interface VersionView {
  /** CURRENT, RAMPING, DRAINING, DRAINED, INACTIVE (as the server names them, without the prefix); null: unknown to the server. */
  status: string | null;
  /** The task queues the server lists for the version, as `name/kind`. */
  queues: string[];
}

/** What the server says of one version (null status: it has not seen the version yet). */
export async function describeVersion(
  connection: NativeConnection,
  namespace: string,
  version: WorkerDeploymentVersion,
): Promise<VersionView> {
  try {
    const res = await connection.workflowService.describeWorkerDeploymentVersion({ namespace, deploymentVersion: version });
    const info = res.workerDeploymentVersionInfo;
    const status = info?.status ? VersionStatus[info.status].replace('WORKER_DEPLOYMENT_VERSION_STATUS_', '') : null;
    const queues = (info?.taskQueueInfos ?? []).map(
      (q) => `${q.name}/${q.type === QueueType.TASK_QUEUE_TYPE_WORKFLOW ? 'workflow' : 'activity'}`,
    );
    return { status, queues };
  } catch (err) {
    if ((err as { code?: number }).code === 5) return { status: null, queues: [] }; // NOT_FOUND
    throw err;
  }
}

/**
 * Makes `version` the deployment's current version once the server lists every queue this worker
 * polls in it. `ignoreMissingTaskQueues`: the version before may have polled queues this worker
 * never will (another host's own queue), which would otherwise refuse the change. A worker that
 * polls no workflow queue (a host serving only its own queue) only waits for its queues: made
 * current, its version would take new runs it cannot run. `timeoutMs` counts from the server's
 * last answer after it was away.
 */
export async function becomeCurrent(
  connection: NativeConnection,
  namespace: string,
  version: WorkerDeploymentVersion,
  queues: PolledQueues,
  identity: string,
  stopping: AbortSignal,
  timeoutMs = 60_000,
): Promise<'made_current' | 'already_current' | 'not_made_current'> {
  const wanted = [...queues.workflow.map((q) => `${q}/workflow`), ...queues.activity.map((q) => `${q}/activity`)];
  faultPoint('before_current');
  let until = Date.now() + timeoutMs;
  let away = false;
  for (;;) {
    // A worker told to stop before its version is listed stops waiting for it.
    if (stopping.aborted) return 'not_made_current';
    let missing: string[];
    try {
      const view = await describeVersion(connection, namespace, version);
      missing = wanted.filter((q) => !view.queues.includes(q));
      if (missing.length === 0) return await makeCurrent(connection, namespace, version, queues, identity, view.status);
    } catch (err) {
      if (!retried(err)) throw err;
      if (!away)
        console.error(
          `worker ${process.pid}: the server is away (code ${(err as { code: number }).code}, ${(err as Error).message.split('\n')[0]}); version ${versionName(version)} is made current once it answers`,
        );
      away = true;
      await new Promise((r) => setTimeout(r, 1000));
      continue;
    }
    if (away) [away, until] = [false, Date.now() + timeoutMs];
    if (Date.now() > until)
      throw new Error(
        `the server did not list ${missing.join(', ')} in version ${versionName(version)} within ${timeoutMs / 1000} s; is Worker Versioning enabled on it (docs/versioning.md)?`,
      );
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Once every queue is listed: the version made current, unless it is already or polls no workflow queue. */
async function makeCurrent(
  connection: NativeConnection,
  namespace: string,
  version: WorkerDeploymentVersion,
  queues: PolledQueues,
  identity: string,
  status: string | null,
): Promise<'made_current' | 'already_current' | 'not_made_current'> {
  if (status === 'CURRENT') return 'already_current';
  if (queues.workflow.length === 0) return 'not_made_current';
  // Asked again after an outage, the next description says whether this one was made.
  await connection.workflowService.setWorkerDeploymentCurrentVersion({
    namespace,
    deploymentName: version.deploymentName,
    buildId: version.buildId,
    ignoreMissingTaskQueues: true,
    identity,
  });
  return 'made_current';
}

/** True when the server reports `version` drained: neither current nor ramping, and no open run pinned to it. */
export async function drained(connection: NativeConnection, namespace: string, version: WorkerDeploymentVersion): Promise<boolean> {
  return (await describeVersion(connection, namespace, version)).status === 'DRAINED';
}
