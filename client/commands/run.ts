/** `run`: starts an agentRun on a fixture or a git repository; with --wait follows it to its end. */
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import type { RunInput } from '../../core/contracts';
import { PROMPT_VERSION } from '../../core/prompt';
import { replayTrusted, type Settings } from '../../host/settings';
import { command, RefusedInput, UsageError, type Values } from '../command';
import { repositoryRead } from '../../core/repo-settings';
import type { CheckedRepositoryRun } from '../repository-run';
import { localEndpoint, startAndFollow } from './shared';

const options = {
  task: { kind: 'string', value: 'TEXT' },
  'task-file': { kind: 'string', value: 'FILE' },
  base: { kind: 'string', value: 'REF' },
  image: { kind: 'string', value: 'NAME' },
  branch: { kind: 'flag' },
  replay: { kind: 'string', value: 'FILE' },
  endpoint: { kind: 'string', value: 'NAME' },
  provider: { kind: 'string', value: 'KIND', choices: ['openai', 'anthropic'] },
  model: { kind: 'string', value: 'NAME' },
  'base-url': { kind: 'string', value: 'URL' },
  'api-key-env': { kind: 'string', value: 'VAR' },
  backend: { kind: 'string', value: 'NAME', default: 'local', choices: ['local', 'docker'] },
  'trust-replay': { kind: 'flag' },
  'trust-repository': { kind: 'flag' },
  /** Default: the repository settings' `policy` (only one that asks a person), else interactive. */
  approver: { kind: 'string', value: 'interactive|policy:NAME' },
  wait: { kind: 'flag' },
  follow: { kind: 'flag' },
  json: { kind: 'flag' },
  id: { kind: 'string', value: 'ID' },
  'max-turns': { kind: 'int', value: 'N' },
  'max-tool-calls': { kind: 'int', value: 'N' },
  'deadline-s': { kind: 'positive', value: 'S' },
  'approval-timeout-s': { kind: 'positive', value: 'S' },
  'max-model-tokens': { kind: 'int', value: 'N' },
  'max-cost-usd': { kind: 'positive', value: 'USD' },
  prompt: { kind: 'string', value: 'VERSION' },
  'allow-test-config-change': { kind: 'flag' },
} as const;

type RunValues = Values<typeof options>;

/** A folder with fixture.json is a fixture; anything else names a git repository. */
const isFixture = (path: string) => existsSync(join(path, 'fixture.json'));

/** Repository runs checked by `check`, for `run` (both get the same parsed values). */
const checked = new WeakMap<object, Promise<CheckedRepositoryRun>>();

/** The repository run the arguments describe, checked before anything connects (RefusedInput otherwise). */
function repositoryRun(path: string, values: RunValues, settings: Settings): Promise<CheckedRepositoryRun> {
  let found = checked.get(values);
  if (!found)
    checked.set(
      values,
      // Loaded when a repository is named: git, docker and the connection are not a fixture run's.
      (found = import('../repository-run').then(({ checkRepositoryRun, localCredentialsFile, taskText }) =>
        checkRepositoryRun({
          path,
          task: taskText(values.task, values['task-file']),
          base: values.base,
          credentialsFile: localCredentialsFile(settings),
          settings,
          read: repositoryRead(values.backend as 'local' | 'docker', values['trust-repository']),
          image: values.image,
        }),
      )),
    );
  return found;
}

export const run = command({
  name: 'run',
  usage: [
    'run <fixture-dir> --replay FILE [--trust-replay] [--backend local|docker] [--approver interactive|policy:NAME] [--wait] [--follow] [--json] [--id ID] [--max-turns N] [--max-tool-calls N] [--deadline-s S] [--approval-timeout-s S] [--allow-test-config-change]',
    'run <fixture-dir> --endpoint NAME --model NAME --backend docker [--max-model-tokens N] [--max-cost-usd USD] [--prompt VERSION] [...the options above]',
    'run <fixture-dir> --provider openai|anthropic --model NAME [--base-url URL] [--api-key-env VAR] --backend docker [...the options above]',
    'run <repo> --task TEXT|--task-file FILE [--base REF] [--image NAME] [--branch] [--trust-repository] (--replay FILE | --endpoint NAME ... | --provider ...) [...the options above]',
  ],
  summary:
    'start an agentRun; print its workflow id; with --wait follow it to the end.\n' +
    '--follow is --wait through the event stream of the console that serves this state folder (the model text as it streams too),\n' +
    'or, with no console, as --wait reads the run.\n' +
    'On the local backend a replay runs only when trusted: --trust-replay, or a file under fixtures/ (AGENT_TRUSTED_REPLAY_DIRS).\n' +
    "--endpoint names one of the worker operator's endpoints (its providers file); on the embedded default,\n" +
    '--provider [--base-url] [--api-key-env] adds such an endpoint to the local providers file, or reuses an equal one.\n' +
    '<repo> is any git repository (a folder with .git, or a bare one): the workspace is the tree of --base (default HEAD),\n' +
    'its .coding-agent.json and AGENTS.md are read from there; --branch (with --wait) makes the verified change a branch.\n' +
    "On the local backend a repository's tests run on this machine with your rights: --trust-repository says you trust its content\n" +
    '(else run it in the sandbox, --backend docker); the worker runs local commands only when its operator allows it (AGENT_ALLOW_LOCAL).\n' +
    '--max-cost-usd stops a live run (an orchestrating one: with all its tasks) before a call that could pass that many US dollars.\n' +
    "--prompt names the prompt version a live source uses (default: the worker's newest, under AGENT_PROMPTS_DIR).\n" +
    "The verifier runs the tests with the base tree's test configuration (conftest.py, pytest.ini, package.json's test script...)\n" +
    "and fails a run that changed it; --allow-test-config-change lets the run change it (a repository's settings cannot).",
  options,
  async check(positionals, values, settings) {
    if (!positionals[0]) throw new UsageError('missing <fixture-dir> or <repo>');
    const sources = (['replay', 'endpoint', 'provider'] as const).filter((k) => values[k] !== undefined);
    if (sources.length === 0)
      throw new UsageError('--replay FILE or --provider NAME is required, or --endpoint NAME (the decision source)');
    if (sources.length > 1) throw new UsageError(`give one decision source, not ${sources.map((k) => `--${k}`).join(' and ')}`);
    if ((values.provider || values.endpoint) && !values.model)
      throw new UsageError('--model NAME is required with --endpoint or --provider');
    if (!values.provider && (values['base-url'] || values['api-key-env']))
      throw new UsageError('--base-url and --api-key-env go with --provider');
    if (values.prompt !== undefined && !values.provider && !values.endpoint)
      throw new UsageError('--prompt VERSION goes with a live source (--endpoint or --provider)');
    if (values.prompt !== undefined && !PROMPT_VERSION.test(values.prompt))
      throw new UsageError(`--prompt must name a version such as v1, got ${JSON.stringify(values.prompt)}`);
    if (values.branch && !values.wait && !values.follow)
      throw new UsageError('--branch needs --wait: the branch is made when the run has completed');
    if (values.image && values.backend !== 'docker')
      throw new UsageError('--image goes with --backend docker: the local backend runs on this machine, in no image');
    if (isFixture(positionals[0])) {
      if (
        values.task !== undefined ||
        values['task-file'] !== undefined ||
        values.base !== undefined ||
        values.branch ||
        values['trust-repository']
      ) {
        throw new UsageError(
          'a fixture brings its own task and tree: --task, --task-file, --base, --branch and --trust-repository are for a repository',
        );
      }
    } else {
      if (values['trust-repository'] && values.backend !== 'local')
        throw new UsageError(
          '--trust-repository goes with the local backend: in the sandbox (--backend docker) a repository needs no trust',
        );
      // Before the repository is read: on the local backend it is read, and its tests run, on this machine.
      if (values.backend === 'local' && !values['trust-repository'])
        throw new RefusedInput(
          `on the local backend the repository's tests run on this machine with your rights: add --trust-repository if you trust the content of ${positionals[0]}, or run it in the sandbox with --backend docker`,
        );
      // The repository, its ref, its task and its settings, before any connection or workflow.
      const found = await repositoryRun(positionals[0], values, settings);
      if (found.settings?.setup && values.backend !== 'docker') {
        throw new RefusedInput(
          '.coding-agent.json has a setup, which runs only on the docker backend (its only network is an egress proxy): add --backend docker',
        );
      }
    }
  },
  async run(session, positionals, values) {
    const fixture = positionals[0];
    const repository = isFixture(fixture) ? null : await repositoryRun(fixture, values, session.settings);
    const approver = values.approver ?? repository?.settings?.policy ?? 'interactive';
    const budgets = Object.fromEntries(
      Object.entries({
        max_turns: values['max-turns'],
        max_tool_calls: values['max-tool-calls'],
        deadline_s: values['deadline-s'],
        max_model_tokens: values['max-model-tokens'],
        approval_timeout_s: values['approval-timeout-s'],
        max_cost_usd: values['max-cost-usd'],
      }).filter(([, v]) => v !== undefined),
    );
    const endpoint = values.provider ? localEndpoint(session, values) : values.endpoint;
    const input: RunInput = {
      ...(repository
        ? { repo: { ...repository.source, ...(values['trust-repository'] ? { trusted: true } : {}) } }
        : { fixture: resolve(fixture) }),
      ...(values.image ? { image: values.image } : {}),
      source:
        endpoint !== undefined
          ? { kind: 'provider', endpoint, model: values.model! }
          : {
              kind: 'replay',
              path: resolve(values.replay!),
              trusted: replayTrusted(session.settings, values.replay!, values['trust-replay']),
            },
      backend: values.backend as RunInput['backend'],
      approver: approver as RunInput['approver'],
      ...(Object.keys(budgets).length ? { budgets } : {}),
      ...(values.prompt !== undefined ? { prompt: values.prompt } : {}),
      ...(values['allow-test-config-change'] ? { allow_test_config_change: true } : {}),
    };
    const name = repository ? repository.facts.name : basename(resolve(fixture));
    const workflowId = values.id ?? `agent-${name}-${randomBytes(4).toString('hex')}`;
    return startAndFollow(session, input, workflowId, values, async (_record, log) => {
      if (!values.branch) return 0;
      const { branchFromRun, NoBranch } = await import('../branch');
      try {
        const made = await branchFromRun(session, workflowId);
        log(`branch ${made.branch} at ${made.commit} (parent ${made.base})`);
        return 0;
      } catch (err) {
        if (!(err instanceof NoBranch)) throw err;
        process.stderr.write(`the run completed, but no branch was made: ${err.message}\n`);
        return 1;
      }
    });
  },
});
