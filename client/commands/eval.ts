/** `eval`: a batch evaluation as a parent workflow; `eval watch`, `eval compare`, `eval --resume`. */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { comparisonHtml } from '../report/compare-html';
import { behavioursText, compareReports, reportJson, reportMarkdown, type EvalReport } from '../report/report';
import { parseApprover } from '../../core/policy';
import { writeFileAtomic } from '../../host/files';
import { command, RefusedInput, UsageError } from '../command';
import { access, localEndpoint, out, webUi } from './shared';
import type { EvalInput, EvalPlan } from '../../core/batch-plan';

export const evaluate = command({
  name: 'eval',
  usage: [
    'eval <fixtures-dir>|<tasks.jsonl>... [--out DIR] [--concurrency N] [--epochs K] [--backend local|docker] [--trust-replay] [--trust-repository] [--approver policy:NAME] [--allow-test-config-change] [--batch ID] [--host-lost-s N] [--json]',
    'eval <fixtures-dir>|<tasks.jsonl>... (--endpoint NAME | --provider openai|anthropic [--base-url URL] [--api-key-env VAR]) --model NAME [--prompt VERSION] --backend docker [the options above]',
    'eval --instances FILE --repos DIR (--gold | --predictions FILE | --endpoint NAME ... --model NAME) [--allow-test-config-change] [the options above]',
    'eval --resume BATCH-ID [--out DIR] [--concurrency N]',
    'eval watch BATCH-ID',
    'eval compare REPORT-A REPORT-B [--json] [--html FILE]',
  ],
  summary:
    'batch evaluation as a parent workflow: every replay of every fixture, K epochs, approved by a named policy;\n' +
    'a .jsonl file lists tasks on git repositories, one a line: {"id", "repo", "base", "task", "tests"?, "acceptance"?, "replays"?};\n' +
    'on the local backend their tests run on this machine with your rights: --trust-repository says you trust every one of them;\n' +
    'writes report.json, report.md, report.html and timings.json to --out (default eval-out), and for repository tasks predictions.jsonl\n' +
    "(SWE-bench's instance_id, model_name_or_path, model_patch: each run's change as its verifier saw it, first epoch).\n" +
    '--instances reads a SWE-bench instance file (JSON or JSONL): each repository from --repos DIR (owner__name or owner/name), nothing fetched;\n' +
    'the problem statement is the task, FAIL_TO_PASS and PASS_TO_PASS decide, test_patch is applied for verification only;\n' +
    "--gold makes each instance's patch its decisions (every one must resolve), --predictions FILE another system's model_patch.\n" +
    '--allow-test-config-change lets runs change the files that configure the test runner (else the base versions run, and such a run fails).\n' +
    '--resume (or the same --batch) starts only the runs that are missing or ended on infrastructure;\n' +
    '--endpoint and --model make a live batch: each fixture or task once per epoch, decided by that model (--prompt: its prompt version);\n' +
    "--provider instead of --endpoint adds such an endpoint to the embedded default's providers file, or reuses an equal one (as run does);\n" +
    "`watch` shows a running batch's progress; `compare` prints the runs that flipped between two reports (McNemar)\n" +
    'and, overall and per fixture, the distributions of pass rate, turns, tool error rate, repeated calls, empty replies and cost\n' +
    'with 95% intervals, marking each difference whose interval excludes 0; --html writes the same as a self-contained page',
  options: {
    out: { kind: 'string', value: 'DIR', default: 'eval-out' },
    concurrency: { kind: 'int', value: 'N', default: 2 },
    epochs: { kind: 'int', value: 'K', default: 1 },
    backend: { kind: 'string', value: 'NAME', default: 'local', choices: ['local', 'docker'] },
    'trust-replay': { kind: 'flag' },
    'trust-repository': { kind: 'flag' },
    approver: { kind: 'string', value: 'policy:NAME', default: 'policy:approve-writable' },
    batch: { kind: 'string', value: 'ID' },
    resume: { kind: 'string', value: 'BATCH-ID' },
    'host-lost-s': { kind: 'int', value: 'N' },
    json: { kind: 'flag' },
    html: { kind: 'string', value: 'FILE' },
    endpoint: { kind: 'string', value: 'NAME' },
    provider: { kind: 'string', value: 'KIND', choices: ['openai', 'anthropic'] },
    'base-url': { kind: 'string', value: 'URL' },
    'api-key-env': { kind: 'string', value: 'VAR' },
    model: { kind: 'string', value: 'NAME' },
    prompt: { kind: 'string', value: 'VERSION' },
    instances: { kind: 'string', value: 'FILE' },
    repos: { kind: 'string', value: 'DIR' },
    gold: { kind: 'flag' },
    predictions: { kind: 'string', value: 'FILE' },
    'allow-test-config-change': { kind: 'flag' },
  },
  offline: (positionals) => positionals[0] === 'compare',
  runOffline: async (_settings, positionals, values) => compareCommand(positionals.slice(1), values.json, values.html),
  check(positionals, values) {
    if (positionals[0] === 'compare' && positionals.length !== 3) throw new UsageError('compare needs two report.json files');
    if (positionals[0] === 'watch' && !positionals[1]) throw new UsageError('missing BATCH-ID');
    if (values.html !== undefined && positionals[0] !== 'compare') throw new UsageError('--html goes with compare');
    if (values.endpoint !== undefined && values.provider !== undefined)
      throw new UsageError('--endpoint and --provider exclude each other');
    const live = values.endpoint !== undefined || values.provider !== undefined;
    if (live !== (values.model !== undefined)) throw new UsageError('--model goes with --endpoint or --provider, and they with it');
    if (values.provider === undefined && (values['base-url'] !== undefined || values['api-key-env'] !== undefined))
      throw new UsageError('--base-url and --api-key-env go with --provider');
    if (values.prompt !== undefined && !live)
      throw new UsageError('--prompt goes with a live batch (--endpoint or --provider, and --model)');
    if (live && values.backend !== 'docker')
      throw new UsageError('a live batch runs on the docker backend (--backend docker): a live model runs only with verified isolation');
    if (parseApprover(values.approver).kind !== 'policy')
      throw new UsageError('--approver must name a policy (policy:NAME): a batch approves one action at a time through a policy');
    if ((values.instances === undefined) !== (values.repos === undefined))
      throw new UsageError('--instances FILE and --repos DIR go together: each instance names its repository, found under --repos');
    const decisions = [values.gold, values.predictions !== undefined, live].filter(Boolean).length;
    if (values.instances !== undefined && decisions !== 1)
      throw new UsageError(
        'an instance file needs one source of decisions: --gold, --predictions FILE, or a live model (--endpoint/--provider and --model)',
      );
    if (values.instances === undefined && (values.gold || values.predictions !== undefined))
      throw new UsageError('--gold and --predictions go with --instances FILE --repos DIR');
    const tasks = positionals.some((p) => p.endsWith('.jsonl')) || values.instances !== undefined;
    if (values['trust-repository'] && (!tasks || values.backend !== 'local'))
      throw new UsageError('--trust-repository goes with a tasks.jsonl or instance batch on the local backend');
    if (tasks && values.backend === 'local' && !values['trust-repository'])
      throw new RefusedInput(
        "on the local backend the repositories' tests run on this machine with your rights: add --trust-repository if you trust the content of every repository the tasks name, or run them in the sandbox with --backend docker",
      );
  },
  async run(session, positionals, values) {
    const { batchInput, batchPredictions, buildPlan, collectReport, followBatch, planSize, resumeAttempts, writeOutputs } =
      await import('../eval');
    const { writePredictions } = await import('../swe-bench');
    if (positionals[0] === 'watch') {
      const end = await followBatch(session.client.workflow.getHandle(positionals[1]), process.stderr);
      out(end.progress);
      return 0;
    }
    const { concurrency } = values;
    const batch = values.resume ?? values.batch ?? `eval-${randomBytes(4).toString('hex')}`;
    const outDir = resolve(values.out);
    const started = new Date();
    const previous = await batchInput(session.client, batch);
    if (values.resume && previous === null) throw new UsageError(`no batch ${batch} to resume`);
    let plan: EvalPlan;
    if (previous) {
      plan = previous.plan;
      if (positionals.length > 0)
        process.stderr.write(`${batch} exists: resuming it with its own plan (the fixture arguments are not used)\n`);
    } else {
      if (positionals.length === 0 && values.instances === undefined) throw new UsageError('missing <fixtures-dir>');
      try {
        plan = await buildPlan(session.settings, positionals, {
          epochs: values.epochs,
          backend: values.backend as EvalPlan['backend'],
          approver: values.approver,
          trustReplay: values['trust-replay'],
          trustRepository: values['trust-repository'],
          hostLostS: values['host-lost-s'],
          allowTestConfig: values['allow-test-config-change'],
          ...(values.instances !== undefined
            ? {
                instances: {
                  file: values.instances,
                  repos: values.repos!,
                  decisions: values.gold ? 'gold' : values.predictions !== undefined ? { predictions: values.predictions } : 'live',
                  dir: outDir,
                },
              }
            : {}),
          ...(values.model !== undefined
            ? {
                live: {
                  endpoint: values.provider !== undefined ? localEndpoint(session, values) : values.endpoint!,
                  model: values.model!,
                  ...(values.prompt !== undefined ? { prompt: values.prompt } : {}),
                },
              }
            : {}),
        });
      } catch (err) {
        throw new UsageError((err as Error).message);
      }
      if (plan.fixtures.length === 0)
        throw new UsageError(
          `no fixture with replays found in ${[...positionals, ...(values.instances ? [values.instances] : [])].join(', ')}`,
        );
    }
    const total = planSize(plan);
    const ui = webUi(session);
    await session.ensureWorker();
    const handle = session.client.workflow.getHandle(batch);
    const collected = await (async () => {
      if (previous !== null && (await handle.describe()).status.name === 'RUNNING') {
        process.stderr.write(`${batch} is still running: following it\n`);
        await followBatch(handle, process.stderr);
      }
      // A fresh batch, or a resume of a closed one: start what is missing or ended on infrastructure.
      const input: EvalInput = { plan, concurrency, out: outDir };
      if (previous) {
        const resume = await resumeAttempts(session.client, batch, plan);
        process.stderr.write(
          `${batch}: resuming; ${resume.retry} runs retried after infrastructure outcomes, ${resume.missing} missing, ${resume.kept} kept\n`,
        );
        if (resume.retry + resume.missing === 0) return collectReport(session.client, session.settings, batch, plan, ui);
        input.attempts = resume.attempts;
      }
      await (await access()).startEval(session.client, input, { taskQueue: session.settings.taskQueue, workflowId: batch });
      process.stderr.write(`workflow ${batch}: ${total} runs, ${concurrency} at a time\n`);
      await followBatch(handle, process.stderr);
      return collectReport(session.client, session.settings, batch, plan, ui);
    })();
    const finished = new Date();
    writeOutputs(outDir, collected, {
      batch,
      started_at: started.toISOString(),
      finished_at: finished.toISOString(),
      duration_s: (finished.getTime() - started.getTime()) / 1000,
      runs: total,
      concurrency,
    });
    const predicted = plan.fixtures.some((f) => f.repo);
    if (predicted) writePredictions(join(outDir, 'predictions.jsonl'), await batchPredictions(session, plan, collected));
    if (values.json) out(reportJson(collected.report).trimEnd());
    else
      out(
        `${reportMarkdown(collected.report)}\nwritten to ${outDir}/report.json, report.md, report.html${predicted ? ', predictions.jsonl' : ''} and timings.json (batch ${batch})`,
      );
    return 0;
  },
});

/**
 * `eval compare A B`: the runs that flipped with the exact McNemar p-value of the flips, and the
 * behaviours with their intervals (client/report/report.ts); `--html` writes the same view as one page.
 */
function compareCommand(files: string[], asJson: boolean, html: string | undefined): number {
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
  if (html !== undefined) writeFileAtomic(resolve(html), comparisonHtml(comparison, { a: resolve(files[0]), b: resolve(files[1]) }));
  if (asJson) {
    out(comparison);
    return 0;
  }
  const lines = [`${comparison.runs} paired runs, ${comparison.flips.length} flipped`];
  for (const f of comparison.flips)
    lines.push(`${f.direction === 'lost' ? '-' : '+'} ${f.fixture} ${f.replay ?? ''} epoch ${f.epoch}: ${f.a} -> ${f.b}`);
  lines.push(
    `McNemar exact p = ${comparison.mcnemar.p} (completed only in A: ${comparison.mcnemar.b}, only in B: ${comparison.mcnemar.c})`,
  );
  const epochs = (r: EvalReport) => r.summary.epochs ?? 1;
  if (epochs(a) > 1 && epochs(b) > 1) for (const f of comparison.per_fixture) lines.push(`  ${f.fixture}: p = ${f.p} (${f.b} vs ${f.c})`);
  lines.push('', ...behavioursText(comparison.behaviours));
  if (html !== undefined) lines.push(`written to ${resolve(html)}`);
  out(lines.join('\n'));
  return 0;
}
