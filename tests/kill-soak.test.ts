/**
 * Kill soak, outside CI (`npm run test:kill-soak`; jest.config.js leaves it out of `npm test`):
 * worker processes SIGKILLed at seeded random moments of canonical, live-streamed (a local
 * OpenAI-protocol server, the docker backend), orchestrating (two tasks, two merges) and long
 * (continue-as-new) runs, a new worker started after each kill. Two clients follow each run by
 * its event stream on a console (docs/delivery.md) and approve its writes from there. A kill
 * lands at a random delay, while the run waits for an approval, while a client's approval is in
 * flight, or right after a local activity handed back its result (the worker armed with
 * `AGENT_FAULT=after_local_activity`, killing itself 0-40 ms later, at its Nth local activity).
 *
 * It prints runs, kills (by moment), completed runs, duplicate writes, lost runs,
 * nondeterminism errors (workflow tasks failed so, in every history of the server), stuck runs and
 * the time to recover (from a kill to the next event of its run on the stream), and fails unless
 * every run completed with one write and one receipt per approved action, both clients got every
 * event of it once, and no workflow task failed on nondeterminism.
 *
 *   KILL_SOAK_SEED    the seed of every choice (printed; the same seed gives the same choices)
 *   KILL_SOAK_KILLS   worker kills in all (default 500)
 *   KILL_SOAK_KINDS   canonical,live,subruns,long (default all four, one lane each)
 *   KILL_SOAK_STUCK_S a run still open this long after its last kill is stuck (default 600)
 */
import { setMaxListeners } from 'node:events';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { WorkflowHandleWithFirstExecutionRunId } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { startConsole, type RunningConsole } from '../client/console/server';
import { startRun } from '../client/run-access';
import type { RunInput } from '../core/contracts';
import type { RunOutcome } from '../core/run-view';
import type { TraceEvent } from '../core/trace';
import { finishedState, seededRandom, startWorker, type WorkerProcess } from './helpers/faults';
import { addEndpoint, endpointOf, ProviderServer, reply, type ReplyCall } from './helpers/provider-server';
import { LINKCHECK, PROJECT_ROOT, tempDir, requireDockerSandbox } from './helpers/run-dir';
import { SseClient, type Received } from './helpers/sse';
import { startServer, traceIn, uniqueQueue, writeReplay } from './helpers/temporal';

type Kind = 'canonical' | 'live' | 'subruns' | 'long';
type Moment = 'delay' | 'approval' | 'action' | 'local';

const SEED = Number(process.env.KILL_SOAK_SEED ?? 20261206);
const KILLS = Number(process.env.KILL_SOAK_KILLS ?? 500);
const KINDS = (process.env.KILL_SOAK_KINDS ?? 'canonical,live,subruns,long').split(',').map((k) => k.trim()) as Kind[];
const STUCK_MS = Number(process.env.KILL_SOAK_STUCK_S ?? 600) * 1000;
/** Long runs continue as new every few turns: the server suggests it past this many events. */
const SUGGEST_CAN_EVENTS = 120;

const TOKEN = 'kill-soak-token-0123456789-0123456789';
const KEY_ENV = 'AGENT_TEST_KILL_SOAK_KEY';
process.env[KEY_ENV] = 'sk-test-kill-soak-7d41';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? 0 : s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

const CANONICAL = JSON.parse(readFileSync(join(LINKCHECK, 'replays', 'canonical.json'), 'utf8')).decisions as {
  kind: string;
  text?: string;
  call?: ReplyCall & { call_id: string };
}[];
/** The canonical session as a live model's replies, one per request: the plan with the first call, each call, the final. */
const REPLIES = (() => {
  const calls = CANONICAL.filter((d) => d.kind === 'tool').map((d) => ({
    id: d.call!.call_id,
    name: d.call!.name,
    arguments: d.call!.arguments,
  }));
  const plan = CANONICAL.find((d) => d.kind === 'plan')!.text!;
  const final = CANONICAL.find((d) => d.kind === 'final')!.text!;
  return [{ text: plan, calls: [calls[0]] }, ...calls.slice(1).map((c) => ({ calls: [c] })), { text: final }];
})();
/** A long session: forty reads of the checker before the canonical decisions. */
const LONG_REPLAY = writeReplay([
  ...Array.from({ length: 40 }, (_, i) => ({
    kind: 'tool',
    call: { call_id: `look-${i + 1}`, name: 'read_file', arguments: { path: 'src/linkcheck.py', start: 1 + (i % 5), end: 20 + i } },
  })),
  ...CANONICAL,
]);
const TWO_MODULES = join(PROJECT_ROOT, 'fixtures', 'py-two-modules');

interface Kill {
  at: number;
  moment: Moment;
  kind: Kind;
  /** The run the lane was following, and the last record frame id it had when the worker died. */
  workflowId: string | null;
  lastId: number;
  recovered: number | null;
}

interface RunResult {
  kind: Kind;
  workflowId: string;
  runId: string;
  state: ReturnType<typeof finishedState> | null;
  /** `action_written` events beyond one per action, in the run and its tasks. */
  duplicateWrites: number;
  /** What the two clients got that is not the run's trace exactly once (missing, repeated, a fault frame). */
  streamProblems: string[];
  error: string | null;
  stuck: boolean;
  hints: number;
}

/** One client following a run: every record frame, the hints, and (if it approves) each requested write approved. */
class Follower {
  readonly sse: SseClient;
  private readonly approved = new Set<string>();
  /** Each approval request's answer, for a run that gets stuck. */
  readonly answers: string[] = [];
  private stopped = false;

  constructor(
    private readonly lane: Lane,
    readonly workflowId: string,
    private readonly name: string,
    private readonly approves: 'always' | 'sometimes' | 'never',
  ) {
    this.sse = new SseClient(`${lane.console.url}/api/runs/${encodeURIComponent(workflowId)}/events?v=2`, {
      authorization: `Bearer ${TOKEN}`,
    });
    this.sse.connect();
    void this.approveLoop();
  }

  stop(): void {
    this.stopped = true;
    this.sse.cut();
  }

  private async approveLoop(): Promise<void> {
    if (this.approves === 'never') return;
    while (!this.stopped && !this.sse.ended) {
      const card = this.sse.frames.find((f) => f.event === 'card' && f.data.state === 'requested' && !this.approved.has(f.data.action_id));
      if (!card) {
        await sleep(100);
        continue;
      }
      this.approved.add(card.data.action_id);
      // The second client approves about one write in three as well (which one depends on the action's id).
      if (this.approves === 'sometimes' && parseInt(card.data.action_id[0], 16) > 4) continue;
      void this.approve(card);
    }
  }

  /** Approves a card; while no worker answers (409) or the run did not confirm, the same request again. */
  private async approve(card: Received): Promise<void> {
    await this.lane.beforeApproval(card);
    const body = {
      id: `${this.name}-${card.data.action_id.slice(0, 16)}`,
      action: 'approve',
      action_id: card.data.action_id,
      args_digest: card.data.args_digest,
      workspace_digest: card.data.workspace_digest,
    };
    for (let first = true; !this.stopped && !this.sse.ended; first = false) {
      const sent = fetch(`${this.lane.console.url}/api/runs/${encodeURIComponent(this.workflowId)}/actions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` },
        body: JSON.stringify(body),
      });
      if (first) this.lane.approvalInFlight();
      const answer = await sent
        .then(async (r) => ({ status: r.status, body: (await r.json()) as { outcome?: string; error?: string } }))
        .catch((err: unknown) => ({ status: 0, body: { error: (err as Error).message } as { outcome?: string; error?: string } }));
      this.answers.push(`${body.id}: ${answer.status} ${answer.body.outcome ?? answer.body.error ?? ''}`.slice(0, 300));
      if (answer.status === 200 && (answer.body.outcome === 'approved' || answer.body.outcome === 'ignored')) return;
      // Sent, but not confirmed in time (the console keeps that answer for this id): the stream says
      // whether the run took it; if not, a new request (a new id) sends it again.
      if (answer.status === 200 && answer.body.outcome === 'unconfirmed') {
        const resolved = await this.sse
          .waitFor(
            'the card resolved',
            (f) => f.event === 'card' && f.data.action_id === card.data.action_id && f.data.state !== 'requested',
            30_000,
          )
          .catch(() => null);
        if (resolved) return;
        body.id = `${body.id.split('~')[0]}~${this.answers.length}`;
      }
      await sleep(1000);
    }
  }
}

/** One kind of run, with its own task queue, state folder, worker and console, started one after another. */
class Lane {
  console!: RunningConsole;
  readonly stateDir: string;
  readonly taskQueue: string;
  readonly random: () => number;
  private worker: WorkerProcess | null = null;
  private workerEnv: Record<string, string> = {};
  followers: Follower[] = [];
  current: string | null = null;
  kills: Kill[] = [];
  results: RunResult[] = [];
  restarts = 0;
  /** Set by the killer: the next approval is killed before it is sent, or right after. */
  private pendingMoment: { moment: 'approval' | 'action'; resolve: () => void } | null = null;
  private stopping = false;
  private index = 0;

  constructor(
    readonly kind: Kind,
    private readonly env: TestWorkflowEnvironment,
    private readonly live: { providers: string; endpoint: string } | null,
    seed: number,
  ) {
    this.stateDir = tempDir(`kill-soak-${kind}`);
    this.taskQueue = uniqueQueue(`kill-soak-${kind}`);
    this.random = seededRandom(seed);
    if (live) this.workerEnv.AGENT_PROVIDERS_FILE = live.providers;
  }

  async open(): Promise<void> {
    this.console = await startConsole({
      client: this.env.client,
      token: TOKEN,
      host: '127.0.0.1',
      port: 0,
      webUi: null,
      namespace: 'default',
      stateDir: this.stateDir,
      apiTokens: new Map([['soak', TOKEN]]),
      recordDir: null,
    });
    await this.startWorker(null);
  }

  /** A fresh worker: plain, or armed to kill itself right after its `count`th local activity. */
  private async startWorker(armed: { count: number; delay: number } | null): Promise<void> {
    const extra = armed
      ? { ...this.workerEnv, AGENT_FAULT_COUNT: String(armed.count), AGENT_FAULT_DELAY_MS: String(armed.delay) }
      : this.workerEnv;
    const w = startWorker(this.env, this.taskQueue, this.stateDir, armed ? 'after_local_activity' : undefined, extra);
    this.worker = w;
    void w.exit.then((end) => {
      if (this.worker !== w || this.stopping) return;
      // It killed itself at its fault point (or died otherwise, said so): counted, and replaced.
      if (end.signal === 'SIGKILL') this.killed('local');
      else process.stderr.write(`kill soak ${this.kind}: a worker ended (${end.signal ?? end.code})\n${w.log().slice(-2000)}\n`);
      this.restarts++;
      void this.startWorker(null);
    });
    await w.ready.catch(() => undefined);
  }

  private killed(moment: Moment): void {
    const followed = this.followers.find((f) => f.workflowId === this.current);
    const last = followed ? Math.max(0, ...followed.sse.frames.map((f) => Number(f.id.split('.')[0])).filter(Number.isFinite)) : 0;
    this.kills.push({ at: Date.now(), moment, kind: this.kind, workflowId: this.current, lastId: last, recovered: null });
  }

  /** SIGKILLs the worker at `moment` and starts another (armed or not, as the seed says). */
  async kill(moment: Moment): Promise<void> {
    const w = this.worker;
    if (w === null) return;
    this.worker = null;
    this.killed(moment);
    w.child.kill('SIGKILL');
    await w.exit;
    await this.startWorker(null);
  }

  /** The next kill is at a local activity: the worker is replaced by one armed to kill itself. */
  async armLocal(): Promise<void> {
    const w = this.worker;
    this.worker = null;
    await w?.stop();
    await this.startWorker({ count: 1 + Math.floor(this.random() * 6), delay: Math.floor(this.random() * 40) });
  }

  /** Waits until the next approval is about to go out ('approval': kills before it, 'action': while it is in flight). */
  killAtApproval(moment: 'approval' | 'action', timeoutMs: number): Promise<boolean> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.pendingMoment = null;
        resolve(false);
      }, timeoutMs);
      this.pendingMoment = {
        moment,
        resolve: () => {
          clearTimeout(timer);
          resolve(true);
        },
      };
    });
  }

  async beforeApproval(card: Received): Promise<void> {
    const p = this.pendingMoment;
    if (p?.moment !== 'approval' || this.current === null || !card) return;
    this.pendingMoment = null;
    // The run waits for this approval: its worker dies meanwhile, and the client sends it anyway.
    await sleep(Math.floor(this.random() * 1500));
    await this.kill('approval');
    p.resolve();
  }

  approvalInFlight(): void {
    const p = this.pendingMoment;
    if (p?.moment !== 'action') return;
    this.pendingMoment = null;
    setTimeout(() => void this.kill('action').then(p.resolve), Math.floor(this.random() * 60));
  }

  input(): RunInput {
    switch (this.kind) {
      case 'canonical':
        return {
          fixture: LINKCHECK,
          source: { kind: 'replay', path: join(LINKCHECK, 'replays', 'canonical.json'), trusted: true },
          backend: 'local',
          approver: 'interactive',
        };
      case 'long':
        return {
          fixture: LINKCHECK,
          source: { kind: 'replay', path: LONG_REPLAY, trusted: true },
          backend: 'local',
          approver: 'interactive',
          budgets: { max_turns: 100, max_tool_calls: 100 },
        };
      case 'subruns':
        return {
          fixture: TWO_MODULES,
          source: { kind: 'replay', path: join(TWO_MODULES, 'replays', 'canonical.json'), trusted: true },
          backend: 'local',
          approver: 'policy:approve-writable',
        };
      case 'live':
        return {
          fixture: LINKCHECK,
          source: { kind: 'provider', endpoint: this.live!.endpoint, model: 'test-model' },
          backend: 'docker',
          approver: 'interactive',
        };
    }
  }

  /** Runs one after another until `more()` says stop. */
  async runs(more: () => boolean): Promise<void> {
    while (more()) this.results.push(await this.runOne());
  }

  private async runOne(): Promise<RunResult> {
    const workflowId = `${this.taskQueue}-run-${++this.index}`;
    let handle: WorkflowHandleWithFirstExecutionRunId | null = null;
    const result: RunResult = {
      kind: this.kind,
      workflowId,
      runId: '',
      state: null,
      duplicateWrites: 0,
      streamProblems: [],
      error: null,
      stuck: false,
      hints: 0,
    };
    try {
      handle = await startRun(this.env.client, this.input(), { taskQueue: this.taskQueue, workflowId });
      result.runId = handle.firstExecutionRunId;
      this.current = workflowId;
      const approves = this.kind === 'subruns' ? 'never' : 'always';
      this.followers = [
        new Follower(this, workflowId, 'a', approves),
        new Follower(this, workflowId, 'b', this.kind === 'subruns' ? 'never' : 'sometimes'),
      ];
      const outcome = await this.outcome(handle);
      if (outcome === null) {
        result.stuck = true;
        const seen = this.followers.map(
          (f, i) =>
            `client ${'ab'[i]}: ${f.sse.frames.length} frames, last ${JSON.stringify(f.sse.frames.slice(-3).map((x) => [x.id, x.event, x.data.state ?? x.data.hint ?? x.data.event?.type ?? x.data.detail]))}; approvals ${JSON.stringify(f.answers.slice(-4))}`,
        );
        result.error = `still open ${STUCK_MS / 1000} s after its last kill; ${seen.join('; ')}`;
        return result;
      }
      result.state = finishedState(outcome, this.stateDir, result.runId);
      await Promise.all(this.followers.map((f) => f.sse.waitFor('the end frame', (x) => x.event === 'end', 120_000).catch(() => null)));
      const trace = traceIn(this.stateDir, result.runId);
      result.streamProblems = this.followers.flatMap((f) =>
        streamProblems(f.sse, trace).map((p) => `client ${f === this.followers[0] ? 'a' : 'b'}: ${p}`),
      );
      result.hints = this.followers.reduce(
        (n, f) => n + f.sse.frames.filter((x) => x.event === 'hint' && x.data.hint === 'no_worker').length,
        0,
      );
      result.duplicateWrites = duplicates(trace) + this.taskDuplicates(outcome);
      for (const k of this.kills) if (k.workflowId === workflowId) k.recovered = recoveryOf(k, this.followers);
      return result;
    } catch (err) {
      result.error = (err as Error).message;
      return result;
    } finally {
      for (const f of this.followers) f.stop();
      this.current = null;
    }
  }

  /** The run's outcome, or null when it is still open STUCK_MS after the last kill it saw (or its start). */
  private async outcome(handle: WorkflowHandleWithFirstExecutionRunId): Promise<RunOutcome | null> {
    // Given up on, the wait for the result must end too: it would outlive the server's connection.
    const abort = new AbortController();
    setMaxListeners(0, abort.signal); // each long poll of the result listens to it
    const result = this.env.client.withAbortSignal(abort.signal, () => handle.result()) as Promise<RunOutcome>;
    result.catch(() => undefined);
    let since = Date.now();
    try {
      for (;;) {
        const done = await Promise.race([result, sleep(5000).then(() => null)]);
        if (done !== null) return done;
        const last = this.kills.filter((k) => k.workflowId === handle.workflowId).at(-1)?.at ?? since;
        since = Math.max(since, last);
        if (Date.now() - since > STUCK_MS) return null;
      }
    } finally {
      abort.abort();
    }
  }

  /** Duplicate writes in the tasks of an orchestrating run (each task's trace is in this state folder). */
  private taskDuplicates(outcome: RunOutcome): number {
    let n = 0;
    for (const t of outcome.state.subruns?.tasks ?? []) if (t.run_id) n += duplicates(traceIn(this.stateDir, t.run_id));
    return n;
  }

  async close(): Promise<void> {
    this.stopping = true;
    for (const f of this.followers) f.stop();
    await this.worker?.stop();
    await this.console?.close();
  }
}

/**
 * Seconds from a kill to the first record frame of its run, on either client, after the last one
 * it had when the worker died (or to the run's end frame when no event came after it).
 */
function recoveryOf(kill: Kill, followers: Follower[]): number | null {
  const after = followers
    .flatMap((f) => f.sse.frames)
    .filter(
      (f) => f.at >= kill.at && (f.event === 'end' || Number(f.id.split('.')[0]) > kill.lastId) && f.event !== 'hint' && f.event !== 'run',
    )
    .map((f) => f.at);
  return after.length === 0 ? null : (Math.min(...after) - kill.at) / 1000;
}

/** `action_written` events beyond one per action. */
function duplicates(trace: TraceEvent[]): number {
  const written = trace.filter((e) => e.type === 'action_written').map((e) => e.action_id);
  return written.length - new Set(written).size;
}

/** What a client got that is not the run's trace exactly once, in order, ended by `end`. */
function streamProblems(sse: SseClient, trace: TraceEvent[]): string[] {
  const problems: string[] = [];
  const seqs = sse.events().map((e) => e.seq);
  const want = trace.map((e) => e.seq);
  if (JSON.stringify(seqs) !== JSON.stringify(want))
    problems.push(`events ${seqs.length} (${new Set(seqs).size} distinct) where the trace has ${want.length}`);
  const faults = sse.frames.filter((f) => f.event === 'fault');
  if (faults.length > 0) problems.push(`fault frames: ${faults.map((f) => JSON.stringify(f.data)).join('; ')}`);
  if (!sse.ended) problems.push('no end frame');
  return problems;
}

/** Every workflow task in the server's histories that failed on nondeterminism, by workflow. */
async function nondeterminismErrors(env: TestWorkflowEnvironment): Promise<string[]> {
  const found: string[] = [];
  for await (const e of env.client.workflow.list()) {
    const history = await env.client.workflow.getHandle(e.workflowId, e.runId).fetchHistory();
    for (const ev of history.events ?? []) {
      const failed = ev.workflowTaskFailedEventAttributes;
      if (failed?.cause === temporal.api.enums.v1.WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_NON_DETERMINISTIC_ERROR)
        found.push(`${e.workflowId} (run ${e.runId}): ${failed.failure?.message ?? ''}`.slice(0, 400));
    }
  }
  return found;
}

describe(`worker processes SIGKILLed at seeded random moments of every kind of run (seed ${SEED}, ${KILLS} kills; ${KINDS.join(', ')})`, () => {
  let env: TestWorkflowEnvironment;
  let provider: ProviderServer | null = null;
  const lanes: Lane[] = [];

  beforeAll(async () => {
    env = await startServer(['--dynamic-config-value', `limit.historyCount.suggestContinueAsNew=${SUGGEST_CAN_EVENTS}`]);
    let live: { providers: string; endpoint: string } | null = null;
    if (KINDS.includes('live')) {
      await requireDockerSandbox();
      // Each request is answered by the conversation so far, so a request asked again after a kill gets the same reply.
      provider = await new ProviderServer((req) => {
        const turn = (req.body.messages as { role: string }[]).filter((m) => m.role === 'assistant').length;
        return { body: reply('openai', REPLIES[turn] ?? { text: 'done' }) };
      }).start();
      const providers = join(tempDir('kill-soak-providers'), 'providers.json');
      live = { providers, endpoint: addEndpoint(providers, endpointOf('openai', provider, KEY_ENV)) };
    }
    KINDS.forEach((kind, i) => lanes.push(new Lane(kind, env, kind === 'live' ? live : null, SEED + i + 1)));
    for (const lane of lanes) await lane.open();
  }, 300_000);

  afterAll(async () => {
    for (const lane of lanes) await lane.close();
    await provider?.close();
    await env?.teardown();
  });

  it(
    'every run completes with one write and one receipt per approved action, every event on both streams once, no nondeterminism',
    async () => {
      const began = Date.now();
      const killsSoFar = () => lanes.reduce((n, l) => n + l.kills.length, 0);
      let killing = true;
      const lanesDone = lanes.map((lane) => lane.runs(() => killing));

      // A killer per lane, one kill at a time on it, at a moment drawn from the lane's seed.
      const killer = async (lane: Lane, random: () => number) => {
        while (killsSoFar() < KILLS) {
          const approvals = lane.kind !== 'subruns';
          const draw = random();
          const moment: Moment = draw < 0.35 ? 'delay' : draw < 0.6 ? 'local' : !approvals ? 'delay' : draw < 0.8 ? 'approval' : 'action';
          await sleep(300 + Math.floor(random() * 2500));
          const before = lane.kills.length;
          if (moment === 'delay') await lane.kill('delay');
          else if (moment === 'local') {
            await lane.armLocal();
            // It kills itself at its Nth local activity, or stays armed until its next kill.
            for (let i = 0; i < 75 && lane.kills.length === before; i++) await sleep(200);
          } else if (!(await lane.killAtApproval(moment, 30_000))) await lane.kill('delay');
          if (lane.kills.length > before && killsSoFar() % 25 === 0)
            process.stderr.write(`kill soak: ${killsSoFar()} kills after ${Math.round((Date.now() - began) / 1000)} s\n`);
        }
      };
      await Promise.all(lanes.map((lane, i) => killer(lane, seededRandom(SEED * 31 + i))));
      killing = false;
      await Promise.all(lanesDone);

      const results = lanes.flatMap((l) => l.results);
      const allKills = lanes.flatMap((l) => l.kills);
      const recover = allKills.map((k) => k.recovered).filter((s): s is number => s !== null);
      const nondeterminism = await nondeterminismErrors(env);
      const completed = results.filter((r) => r.state?.status === 'completed').length;
      const stuck = results.filter((r) => r.stuck).length;
      const lost = results.filter((r) => !r.stuck && r.state === null).length;
      const duplicatesAll = results.reduce((n, r) => n + r.duplicateWrites, 0);
      const byMoment = (['delay', 'approval', 'action', 'local'] as Moment[])
        .map((m) => `${m} ${allKills.filter((k) => k.moment === m).length}`)
        .join(', ');
      const byKind = KINDS.map((k) => `${k} ${results.filter((r) => r.kind === k).length}`).join(', ');
      const failures = results.flatMap((r) => [
        ...(r.error ? [`${r.workflowId}: ${r.error}`] : []),
        ...(r.state && r.state.status !== 'completed' ? [`${r.workflowId}: ${JSON.stringify(r.state)}`] : []),
        // A merge's receipt holds the digests of the merge, not of one file: a task's files are checked in its own run.
        ...(r.state && r.kind !== 'subruns' && r.state.digest_mismatches.length
          ? [`${r.workflowId}: digests differ for ${r.state.digest_mismatches.join(', ')}`]
          : []),
        ...r.streamProblems.map((p) => `${r.workflowId}: ${p}`),
      ]);
      console.log(
        [
          `kill soak (seed ${SEED}, ${Math.round((Date.now() - began) / 1000)} s):`,
          `  runs ${results.length} (${byKind}), kills ${allKills.length} (${byMoment}), worker restarts ${lanes.reduce((n, l) => n + l.restarts, 0)}`,
          `  completed ${completed}, duplicate writes ${duplicatesAll}, lost runs ${lost}, nondeterminism errors ${nondeterminism.length}, stuck runs ${stuck}`,
          `  time to recover (kill to the run's next event on its stream): median ${median(recover).toFixed(1)} s, longest ${Math.max(0, ...recover).toFixed(1)} s`,
          ...nondeterminism.map((n) => `  nondeterminism: ${n}`),
          ...failures.map((f) => `  ${f}`),
        ].join('\n'),
      );
      expect({ completed, duplicates: duplicatesAll, lost, nondeterminism, stuck, failures }).toEqual({
        completed: results.length,
        duplicates: 0,
        lost: 0,
        nondeterminism: [],
        stuck: 0,
        failures: [],
      });
    },
    12 * 3600_000,
  );
});
