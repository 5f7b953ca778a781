#!/usr/bin/env node
/**
 * `npm run agent -- <command>` (or the package's `coding-agent` bin): the one entry point (SPEC section 8).
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { userInfo } from 'node:os';
import { basename, resolve } from 'node:path';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { endpointSchema, type RunInput } from '../core/contracts';
import { formatIssues } from '../core/validate';
import { ensureEndpoint } from '../activities/providers/endpoints';
import { liveWorker } from '../worker/background';
import { workerIdentity } from '../host/build';
import { compareReports, reportJson, reportMarkdown, type EvalReport } from '../core/report';
import type { EvalInput, EvalPlan } from '../workflows/agentEval';
import { buildRecord, type RunView } from '../core/run-view';
import type { TraceEvent } from '../core/trace';
import { exportReplay } from './export-replay';
import { fullEvent, mergeTrace, openStore, storedTrace } from './stored-trace';
import { describeEvent, describePending } from './follow';
import type { RunHandle } from './run-access';
import { replayTrusted } from '../worker/settings';
import type { Session } from './session';

class UsageError extends Error {}

interface Command {
  usage: string;
  summary: string;
  options: NonNullable<ParseArgsConfig['options']>;
  run(session: Session, positionals: string[], values: Record<string, any>): Promise<number>;
  /** True when this invocation needs no Temporal connection (it is then given no session). */
  offline?: (positionals: string[]) => boolean;
}

const json = { type: 'boolean' } as const;
const principal = () => `user:${userInfo().username}`;
const out = (value: unknown) => process.stdout.write(`${typeof value === 'string' ? value : JSON.stringify(value, null, 2)}\n`);

/** Loaded with the first command that talks to Temporal (help and usage errors never load the SDK). */
const access = () => import('./run-access');

async function handleFor(session: Session, positionals: string[]): Promise<RunHandle> {
  const id = positionals[0];
  if (!id) throw new UsageError('missing <workflow-id>');
  return (await access()).runHandle(session.client, id);
}

/**
 * State and trace of a run: the state from its result once closed (no worker needed), else by
 * query; the trace from the host store (this machine's state folder), merged with the events the
 * running run holds. `full` resolves the references in events to the stored contents.
 */
async function readRun(session: Session, handle: RunHandle, full = false): Promise<{ view: RunView; trace: TraceEvent[] }> {
  const { readRun: read, NoWorkerAnswered } = await access();
  let live;
  try {
    // Embedded default: the background worker may not run (yet); start it and ask again.
    live = await read(handle, { noAnswer: session.embedded ? async () => void (await session.ensureWorker()) : undefined });
  } catch (err) {
    if (err instanceof NoWorkerAnswered) throw new Error(`${err.message} on task queue ${session.settings.taskQueue}; start one with npm run worker`);
    throw err;
  }
  const store = openStore(session.settings.stateDir);
  if (store === null) return { view: live.view, trace: live.trace };
  try {
    const trace = mergeTrace(storedTrace(store, live.view.run_id), live.trace);
    return { view: live.view, trace: full ? trace.map((e) => fullEvent(store, e)) : trace };
  } finally {
    store.close();
  }
}

/**
 * The workers that polled the run queue in the last minute (their identity names their build),
 * and on the embedded default the state folder's background worker.
 */
async function queueWorkers(session: Session): Promise<{ identity: string; background: boolean }[]> {
  const { pollers } = await session.client.workflowService.describeTaskQueue({
    namespace: session.settings.namespace,
    taskQueue: { name: session.settings.taskQueue, kind: 1 }, // TASK_QUEUE_KIND_NORMAL
    taskQueueType: 1, // TASK_QUEUE_TYPE_WORKFLOW
  });
  const recent = (pollers ?? []).filter((p) => Number(p.lastAccessTime?.seconds ?? 0) * 1000 > Date.now() - 60_000);
  const own = session.embedded ? liveWorker(session.settings.stateDir) : null;
  const workers = recent.map((p) => ({ identity: p.identity ?? '?', background: own !== null && (p.identity ?? '').startsWith(`${own.pid}@`) }));
  if (own !== null && !workers.some((w) => w.background)) workers.push({ identity: workerIdentity(own.pid, own.build), background: true });
  return workers.sort((a, b) => Number(b.background) - Number(a.background) || a.identity.localeCompare(b.identity));
}

async function signalApproval(session: Session, positionals: string[], values: Record<string, any>, decision: 'approve' | 'reject'): Promise<number> {
  const handle = await handleFor(session, positionals);
  const { view } = await readRun(session, handle);
  const pending = view.pending_approval;
  if (!pending) {
    process.stderr.write(`no approval is pending for ${handle.workflowId} (status ${view.status})\n`);
    return 2;
  }
  if (positionals[1] && positionals[1] !== pending.action_id) {
    process.stderr.write(`action ${positionals[1]} is not the pending action; pending is ${pending.action_id} (${pending.path})\n`);
    return 2;
  }
  const { approvalFor, ORIGIN, sendApproval } = await access();
  const signal = approvalFor(pending, decision, values.principal ?? principal(), values.reason, `${ORIGIN}:${decision}:${pending.action_id}`);
  await sendApproval(handle, signal);
  if (values.json) out(signal);
  else out(`${decision === 'approve' ? 'approved' : 'rejected'} ${pending.action_id} (apply_patch ${pending.path})`);
  return 0;
}

const COMMANDS: Record<string, Command> = {
  run: {
    usage:
      'run <fixture-dir> (--replay FILE | --endpoint NAME --model NAME | --provider openai|anthropic --model NAME [--base-url URL] [--api-key-env VAR]) [--backend local|docker] [--trust-replay] [--approver interactive|policy:NAME] [--wait] [--json] [--id ID] [--max-turns N] [--max-tool-calls N] [--deadline-s S] [--approval-timeout-s S] [--max-model-tokens N]',
    summary:
      'start an agentRun; print its workflow id; with --wait follow it to the end.\nOn the local backend a replay runs only when trusted: --trust-replay, or a file under fixtures/ (AGENT_TRUSTED_REPLAY_DIRS).\n' +
      "--endpoint names one of the worker operator's endpoints (its providers file); on the embedded default,\n" +
      '--provider [--base-url] [--api-key-env] adds such an endpoint to the local providers file, or reuses an equal one.',
    options: {
      replay: { type: 'string' },
      endpoint: { type: 'string' },
      provider: { type: 'string' },
      model: { type: 'string' },
      'base-url': { type: 'string' },
      'api-key-env': { type: 'string' },
      'max-model-tokens': { type: 'string' },
      'approval-timeout-s': { type: 'string' },
      backend: { type: 'string', default: 'local' },
      'trust-replay': { type: 'boolean', default: false },
      approver: { type: 'string', default: 'interactive' },
      wait: { type: 'boolean', default: false },
      id: { type: 'string' },
      'max-turns': { type: 'string' },
      'max-tool-calls': { type: 'string' },
      'deadline-s': { type: 'string' },
      json,
    },
    async run(session, positionals, values) {
      const fixture = positionals[0];
      if (!fixture) throw new UsageError('missing <fixture-dir>');
      const sources = ['replay', 'endpoint', 'provider'].filter((k) => values[k] !== undefined);
      if (sources.length === 0) throw new UsageError('--replay FILE or --provider NAME is required, or --endpoint NAME (the decision source)');
      if (sources.length > 1) throw new UsageError(`give one decision source, not ${sources.map((k) => `--${k}`).join(' and ')}`);
      if (values.provider && values.provider !== 'openai' && values.provider !== 'anthropic') throw new UsageError('--provider must be openai or anthropic');
      if ((values.provider || values.endpoint) && !values.model) throw new UsageError('--model NAME is required with --endpoint or --provider');
      if (!values.provider && (values['base-url'] || values['api-key-env'])) throw new UsageError('--base-url and --api-key-env go with --provider');
      if (values.backend !== 'local' && values.backend !== 'docker') throw new UsageError('--backend must be local or docker');
      const num = (name: string) => {
        if (values[name] === undefined) return undefined;
        const value = Number(values[name]);
        const real = name === 'deadline-s' || name === 'approval-timeout-s';
        if (!(value > 0) || (!real && !Number.isInteger(value))) throw new UsageError(`--${name} must be a positive ${real ? 'number' : 'integer'}, got ${JSON.stringify(values[name])}`);
        return value;
      };
      const budgets = Object.fromEntries(
        Object.entries({ max_turns: num('max-turns'), max_tool_calls: num('max-tool-calls'), deadline_s: num('deadline-s'), max_model_tokens: num('max-model-tokens'), approval_timeout_s: num('approval-timeout-s') }).filter(([, v]) => v !== undefined),
      );
      const endpoint = values.provider ? localEndpoint(session, values) : values.endpoint;
      const input: RunInput = {
        fixture: resolve(fixture),
        source:
          endpoint !== undefined
            ? { kind: 'provider', endpoint, model: values.model }
            : { kind: 'replay', path: resolve(values.replay), trusted: replayTrusted(session.settings, values.replay, values['trust-replay']) },
        backend: values.backend,
        approver: values.approver,
        ...(Object.keys(budgets).length ? { budgets } : {}),
      };
      const workflowId = values.id ?? `agent-${basename(resolve(fixture))}-${randomBytes(4).toString('hex')}`;
      const { startRun } = await access();
      const start = () => startRun(session.client, input, { taskQueue: session.settings.taskQueue, workflowId });
      await session.ensureWorker();
      if (!values.wait) {
        const handle = await start();
        out(values.json ? { workflow_id: handle.workflowId, run_id: handle.firstExecutionRunId } : handle.workflowId);
        return 0;
      }
      {
        const handle = await start();
        const log = (line: string) => (values.json ? process.stderr : process.stdout).write(`${line}\n`);
        log(`workflow ${handle.workflowId}`);
        try {
          const stored = (runId: string) => {
            const store = openStore(session.settings.stateDir);
            try {
              return store ? storedTrace(store, runId) : [];
            } finally {
              store?.close();
            }
          };
          const { followRun } = await import('./follow');
          const record = await followRun(handle, { interactive: values.approver === 'interactive', principal: principal(), log, stored });
          if (values.json) out(JSON.stringify(record));
          else log(`\n${record.status}${record.reason ? ` (${record.reason})` : ''}: ${record.writes} writes, ${record.receipts} receipts, diff ${record.diff_paths.join(', ') || '(none)'}`);
          return record.status === 'completed' ? 0 : 1;
        } catch (err) {
          if (!(err instanceof (await import('./follow')).StdinClosed)) throw err;
          process.stderr.write(`${err.message}\nthe run keeps waiting; approve with: npm run agent -- approve ${handle.workflowId}\n`);
          return 3;
        }
      }
    },
  },
  approve: {
    usage: 'approve <workflow-id> [<action-id>] [--principal NAME] [--json]',
    summary: 'send the approval Signal for the pending action, with its digests',
    options: { principal: { type: 'string' }, json },
    run: (session, positionals, values) => signalApproval(session, positionals, values, 'approve'),
  },
  reject: {
    usage: 'reject <workflow-id> [<action-id>] [--reason TEXT] [--principal NAME] [--json]',
    summary: 'send a rejecting approval Signal for the pending action',
    options: { reason: { type: 'string' }, principal: { type: 'string' }, json },
    run: (session, positionals, values) => signalApproval(session, positionals, values, 'reject'),
  },
  status: {
    usage: 'status <workflow-id> [--json]',
    summary: 'status, reason, pending approval (action, path, diff) and counters',
    options: { json },
    async run(session, positionals, values) {
      const handle = await handleFor(session, positionals);
      const { view } = await readRun(session, handle);
      const workers = await queueWorkers(session);
      if (values.json) {
        out({ ...view, workers });
        return 0;
      }
      const c = view.counters;
      out(`${handle.workflowId}: ${view.status}${view.reason ? ` (${view.reason})` : ''}${view.detail ? `: ${view.detail}` : ''}`);
      out(`fixture ${view.fixture ?? '?'}, replay ${view.replay ?? '?'}, backend ${view.backend}, approver ${view.approver}`);
      out(`turns ${c.turns}, tool calls ${c.tool_calls}, writes ${c.writes}, receipts ${c.receipts}, model retries ${c.model_retries}`);
      if (view.pending_approval) out(`\npending approval:\n${describePending(view.pending_approval)}`);
      if (view.verification) out(`\nrecord: ${JSON.stringify(buildRecord(view))}`);
      for (const w of workers) out(`served by worker ${w.identity}${w.background ? ' (the background worker of this state folder)' : ''}`);
      return 0;
    },
  },
  trace: {
    usage: 'trace <workflow-id> [--full] [--json]',
    summary: 'the trace events of a run (from the host store of this machine);\n--full resolves references: whole tool results, calls and plans',
    options: { full: { type: 'boolean', default: false }, json },
    async run(session, positionals, values) {
      const handle = await handleFor(session, positionals);
      const { trace: events } = await readRun(session, handle, values.full);
      if (values.json) out(events);
      else for (const e of events) out(describeEvent(e));
      return 0;
    },
  },
  'export-replay': {
    usage: 'export-replay <workflow-id>',
    summary: "print a finished run's decisions as a replay (SPEC section 5), from the host store of this machine",
    options: {},
    async run(session, positionals) {
      const handle = await handleFor(session, positionals);
      const { isRunning, runOutcome } = await access();
      if (await isRunning(handle)) {
        process.stderr.write(`${handle.workflowId} is still running; export it when it has finished\n`);
        return 2;
      }
      const outcome = await runOutcome(handle);
      const store = openStore(session.settings.stateDir);
      if (store === null) {
        process.stderr.write(`no host store in ${session.settings.stateDir}: run this on the worker host that ran ${handle.workflowId}\n`);
        return 1;
      }
      try {
        out(JSON.stringify(exportReplay(store, outcome.transcript), null, 2));
      } finally {
        store.close();
      }
      return 0;
    },
  },
  eval: {
    usage:
      'eval <fixtures-dir>... [--out DIR] [--concurrency N] [--epochs K] [--backend local|docker] [--trust-replay] [--approver policy:NAME] [--batch ID] [--host-lost-s N] [--json]\n' +
      '       eval --resume BATCH-ID [--out DIR] [--concurrency N]\n       eval watch BATCH-ID\n       eval compare REPORT-A REPORT-B [--json]',
    summary:
      'batch evaluation as a parent workflow: every replay of every fixture, K epochs, approved by a named policy;\n' +
      'writes report.json, report.md, report.html and timings.json to --out (default eval-out).\n' +
      '--resume (or the same --batch) starts only the runs that are missing or ended on infrastructure;\n' +
      '`watch` shows a running batch\'s progress; `compare` prints the runs that flipped between two reports',
    options: {
      out: { type: 'string', default: 'eval-out' },
      concurrency: { type: 'string', default: '2' },
      epochs: { type: 'string', default: '1' },
      backend: { type: 'string', default: 'local' },
      'trust-replay': { type: 'boolean', default: false },
      approver: { type: 'string', default: 'policy:approve-writable' },
      batch: { type: 'string' },
      resume: { type: 'string' },
      'host-lost-s': { type: 'string' },
      json,
    },
    offline: (positionals) => positionals[0] === 'compare',
    async run(session, positionals, values) {
      if (positionals[0] === 'compare') return compareCommand(positionals.slice(1), values.json);
      if (positionals[0] === 'watch') {
        if (!positionals[1]) throw new UsageError('missing BATCH-ID');
        const { followBatch } = await import('./eval');
        const end = await followBatch(session.client.workflow.getHandle(positionals[1]), process.stderr);
        out(end.progress);
        return 0;
      }
      const concurrency = positiveInt(values.concurrency, '--concurrency');
      const epochs = positiveInt(values.epochs, '--epochs');
      const hostLostS = values['host-lost-s'] === undefined ? undefined : positiveInt(values['host-lost-s'], '--host-lost-s');
      const batch: string = values.resume ?? values.batch ?? `eval-${randomBytes(4).toString('hex')}`;
      const outDir = resolve(values.out);
      const started = new Date();
      const { batchInput, buildPlan, collectReport, followBatch: follow, planSize, resumeAttempts, writeOutputs } = await import('./eval');
      const previous = await batchInput(session.client, batch);
      if (values.resume && previous === null) throw new UsageError(`no batch ${batch} to resume`);
      let plan: EvalPlan;
      if (previous) {
        plan = previous.plan;
        if (positionals.length > 0) process.stderr.write(`${batch} exists: resuming it with its own plan (the fixture arguments are not used)\n`);
      } else {
        if (positionals.length === 0) throw new UsageError('missing <fixtures-dir>');
        if (values.backend !== 'local' && values.backend !== 'docker') throw new UsageError('--backend must be local or docker');
        if (!String(values.approver).startsWith('policy:')) throw new UsageError('--approver must name a policy (policy:NAME): a batch approves one action at a time through a policy');
        try {
          plan = buildPlan(session.settings, positionals, { epochs, backend: values.backend, approver: values.approver, trustReplay: values['trust-replay'], hostLostS });
        } catch (err) {
          throw new UsageError((err as Error).message);
        }
        if (plan.fixtures.length === 0) throw new UsageError(`no fixture with replays found in ${positionals.join(', ')}`);
      }
      const total = planSize(plan);
      const webUi = session.embedded ? `http://localhost:${session.settings.devUiPort}` : (process.env.AGENT_WEB_UI_URL ?? null);
      await session.ensureWorker();
      const collected = await (async () => {
        const handle = session.client.workflow.getHandle(batch);
        if (previous !== null && (await handle.describe()).status.name === 'RUNNING') {
          process.stderr.write(`${batch} is still running: following it\n`);
          await follow(handle, process.stderr);
        }
        // A fresh batch, or a resume of a closed one: start what is missing or ended on infrastructure.
        const input: EvalInput = { plan, concurrency, out: outDir };
        if (previous) {
          const resume = await resumeAttempts(session.client, batch, plan);
          process.stderr.write(`${batch}: resuming; ${resume.retry} runs retried after infrastructure outcomes, ${resume.missing} missing, ${resume.kept} kept\n`);
          if (resume.retry + resume.missing === 0) return collectReport(session.client, session.settings, batch, plan, webUi);
          input.attempts = resume.attempts;
        }
        await (await access()).startEval(session.client, input, { taskQueue: session.settings.taskQueue, workflowId: batch });
        process.stderr.write(`workflow ${batch}: ${total} runs, ${concurrency} at a time\n`);
        await follow(handle, process.stderr);
        return collectReport(session.client, session.settings, batch, plan, webUi);
      })();
      const finished = new Date();
      writeOutputs(outDir, collected, { batch, started_at: started.toISOString(), finished_at: finished.toISOString(), duration_s: (finished.getTime() - started.getTime()) / 1000, runs: total, concurrency });
      if (values.json) out(reportJson(collected.report).trimEnd());
      else out(`${reportMarkdown(collected.report)}\nwritten to ${outDir}/report.json, report.md, report.html and timings.json (batch ${batch})`);
      return 0;
    },
  },
  steer: {
    usage: 'steer <workflow-id> <message>',
    summary: 'add a user message to the next decision (Signal steer)',
    options: {},
    async run(session, positionals) {
      if (!positionals[1]) throw new UsageError('missing <message>');
      const { ORIGIN, sendSteer } = await access();
      await sendSteer(await handleFor(session, positionals), positionals.slice(1).join(' '), `${ORIGIN}:steer`);
      return 0;
    },
  },
  console: {
    usage: 'console [--port 8787] [--host ADDRESS] [--token-file FILE]',
    summary:
      'serve the approval console: runs awaiting approval, the card of each pending write, Approve / Reject in a browser.\n' +
      'Bound to 127.0.0.1 unless --host is given. Prints a one-time sign-in link (one use, within 10 minutes); after that, sign in\n' +
      'by typing the token: the first line of --token-file, or a fresh one written to <state>/console-token (mode 0600).',
    options: { port: { type: 'string', default: '8787' }, host: { type: 'string' }, 'token-file': { type: 'string' } },
    async run(session, _positionals, values) {
      const port = values.port === '0' ? 0 : positiveInt(values.port, '--port');
      const host: string = values.host ?? '127.0.0.1';
      const { freshToken, readToken } = await import('./console/token');
      let token: string;
      let tokenFile: string;
      if (values['token-file']) {
        tokenFile = values['token-file'];
        try {
          token = readToken(tokenFile);
        } catch (err) {
          throw new UsageError(`--token-file: ${(err as Error).message}`);
        }
      } else {
        ({ token, file: tokenFile } = freshToken(session.settings.stateDir));
      }
      const { CODE_TTL_MS, isLoopback, startConsole } = await import('./console/server');
      if (!isLoopback(host)) process.stderr.write(`warning: serving the console on ${host}, not a loopback address: anyone who reaches it and holds the token or a sign-in link can approve writes\n`);
      await session.ensureWorker();
      const webUi = session.embedded ? `http://localhost:${session.settings.devUiPort}` : (process.env.AGENT_WEB_UI_URL ?? null);
      const app = await startConsole({ client: session.client, token, host, port, webUi, namespace: session.settings.namespace });
      out(`console on ${app.url}; sign in at ${app.signInLink()} (one use, within ${CODE_TTL_MS / 60_000} minutes)`);
      out(`or sign in at ${app.url}/login with the token in ${resolve(tokenFile)}`);
      await new Promise<void>((resolve) => {
        process.once('SIGINT', resolve);
        process.once('SIGTERM', resolve);
      });
      await app.close();
      return 0;
    },
  },
  interrupt: {
    usage: 'interrupt <workflow-id> [--reason TEXT]',
    summary: 'stop the current turn at the next step boundary (Signal interrupt)',
    options: { reason: { type: 'string' } },
    async run(session, positionals, values) {
      const { ORIGIN, sendInterrupt } = await access();
      await sendInterrupt(await handleFor(session, positionals), values.reason, `${ORIGIN}:interrupt`);
      return 0;
    },
  },
};

/**
 * `--provider KIND [--base-url URL] [--api-key-env VAR]` on the embedded default: the endpoint of
 * the local providers file with exactly these settings, added when there is none. A cluster's
 * endpoints are its operator's: there a run names one with --endpoint.
 */
function localEndpoint(session: Session, values: Record<string, any>): string {
  if (!session.embedded) throw new UsageError("--provider writes the embedded default's providers file; against a cluster, name one of its operator's endpoints with --endpoint NAME");
  const kind = values.provider as 'openai' | 'anthropic';
  const wanted = { kind, base_url: values['base-url'], api_key_env: values['api-key-env'] ?? (kind === 'openai' ? 'OPENAI_API_KEY' : 'ANTHROPIC_API_KEY') };
  const parsed = endpointSchema.omit({ name: true, models: true }).safeParse(wanted);
  if (!parsed.success) throw new UsageError(formatIssues(parsed.error));
  const { name, added } = ensureEndpoint(session.settings.providersFile, parsed.data);
  process.stderr.write(`endpoint ${name} (${kind}, key from ${wanted.api_key_env}) ${added ? 'added to' : 'found in'} ${session.settings.providersFile}\n`);
  return name;
}

function positiveInt(value: string, flag: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new UsageError(`${flag} must be a positive integer`);
  return n;
}

/** `eval compare A B`: the runs that flipped, and the exact McNemar p-value of the flips. */
function compareCommand(files: string[], asJson: boolean): number {
  if (files.length !== 2) throw new UsageError('compare needs two report.json files');
  const [a, b] = files.map((f) => {
    try {
      return JSON.parse(readFileSync(f, 'utf8')) as EvalReport;
    } catch (err) {
      throw new UsageError(`${f}: ${(err as Error).message}`);
    }
  });
  let comparison;
  try {
    comparison = compareReports(a, b);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  if (asJson) {
    out(comparison);
    return 0;
  }
  const lines = [`${comparison.runs} paired runs, ${comparison.flips.length} flipped`];
  for (const f of comparison.flips) lines.push(`${f.direction === 'lost' ? '-' : '+'} ${f.fixture} ${f.replay ?? ''} epoch ${f.epoch}: ${f.a} -> ${f.b}`);
  lines.push(`McNemar exact p = ${comparison.mcnemar.p} (completed only in A: ${comparison.mcnemar.b}, only in B: ${comparison.mcnemar.c})`);
  const epochs = (r: EvalReport) => r.summary.epochs ?? 1;
  if (epochs(a) > 1 && epochs(b) > 1) for (const f of comparison.per_fixture) lines.push(`  ${f.fixture}: p = ${f.p} (${f.b} vs ${f.c})`);
  out(lines.join('\n'));
  return 0;
}

function help(): string {
  const lines = ['usage: npm run agent -- <command> [options]', '', 'commands:'];
  for (const [name, c] of Object.entries(COMMANDS)) lines.push(`  ${name.padEnd(10)} ${c.summary}`);
  lines.push('', 'Each command has --help. With TEMPORAL_ADDRESS unset, a local Temporal dev server is started or reused', '(Web UI on http://localhost:8233) with state under .agent-state/ (AGENT_STATE_DIR).');
  return lines.join('\n');
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    out(help());
    return name ? 0 : 2;
  }
  const command = COMMANDS[name];
  if (!command) {
    process.stderr.write(`unknown command ${JSON.stringify(name)}\n${help()}\n`);
    return 2;
  }
  let parsed;
  try {
    parsed = parseArgs({ args: rest, options: { ...command.options, help: { type: 'boolean', short: 'h' } }, allowPositionals: true, strict: true });
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\nusage: npm run agent -- ${command.usage}\n`);
    return 2;
  }
  if (parsed.values.help) {
    out(`usage: npm run agent -- ${command.usage}\n\n${command.summary}`);
    return 0;
  }
  // Loaded here, not at the top: help and usage errors answer without loading the Temporal SDK.
  const offline = command.offline?.(parsed.positionals) ?? false;
  const session = offline ? (null as unknown as Session) : await (await import('./session')).openSession();
  try {
    return await command.run(session, parsed.positionals, parsed.values);
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`${err.message}\nusage: npm run agent -- ${command.usage}\n`);
      return 2;
    }
    throw err;
  } finally {
    if (!offline) await session.close();
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    process.stderr.write(`error: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  },
);
