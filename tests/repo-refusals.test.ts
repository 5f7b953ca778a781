/**
 * A repository run that cannot start is refused by the command line before anything connects:
 * one line naming the fault (the path, the ref, the task, the settings field), exit status 2,
 * and no dev server, worker or workflow started (the state folder stays empty). Settings are
 * read from the base commit, never from the working tree.
 */
import { readSettings } from '../host/settings';
import { execFile } from 'node:child_process';
import { readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { checkRepositoryRun } from '../client/repository-run';
import { git, sampleRepo } from './helpers/git-repo';
import { freePort, LINKCHECK, PROJECT_ROOT, tempDir } from './helpers/run-dir';

const exec = promisify(execFile);
const CLI = join(PROJECT_ROOT, 'dist', 'client', 'cli.js');

/** A repository whose HEAD commit has `settings` as .coding-agent.json. */
function withSettings(settings: unknown): string {
  const { dir } = sampleRepo(LINKCHECK, { '.coding-agent.json': typeof settings === 'string' ? settings : JSON.stringify(settings) });
  return dir;
}

async function refused(...args: string[]): Promise<{ code: number; lines: string[]; state: string[] }> {
  const stateDir = tempDir('agent-refused');
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    AGENT_STATE_DIR: stateDir,
    AGENT_DEV_SERVER_PORT: String(await freePort()),
    AGENT_DEV_UI_PORT: String(await freePort()),
  };
  delete env.TEMPORAL_ADDRESS;
  const failed = await exec(process.execPath, [CLI, 'run', ...args], { env, cwd: PROJECT_ROOT }).then(
    () => ({ code: 0, stderr: '' }),
    (e: { code: number; stderr: string }) => e,
  );
  return { code: failed.code, lines: failed.stderr.split('\n').filter(Boolean), state: readdirSync(stateDir) };
}

const REPLAY = join(LINKCHECK, 'replays', 'canonical.json');
const setup = { commands: [['pip', 'install', '-e', '.']], timeout_s: 60 };

describe('a repository run that cannot start', () => {
  it.each(
    [
      [
        'an unknown field',
        { schema_version: 1, tests: { command: ['pytest'], format: 'pytest', timeout_s: 60 }, retries: 3 },
        '.coding-agent.json: (root): Unrecognized key: "retries"',
      ],
      [
        'a bad glob',
        { schema_version: 1, protected: ['.git/**', 'secrets/**.pem'] },
        '.coding-agent.json: protected.1: "secrets/**.pem": ** must be a whole path segment (src/**/x.py, not src/**.py)',
      ],
      [
        'an unknown test format',
        { schema_version: 1, tests: { command: ['cargo', 'test'], format: 'cargo', timeout_s: 60 } },
        '.coding-agent.json: tests.format: Invalid option: expected one of "pytest"|"node-test"|"junit"',
      ],
      [
        'an unknown approval policy',
        { schema_version: 1, policy: 'policy:approve-everything' },
        '.coding-agent.json: policy: unknown approval policy policy:approve-everything (known: policy:approve-writable)',
      ],
      [
        'a setup without --backend docker',
        { schema_version: 1, setup: { commands: [['pip', 'install', '-e', '.']], timeout_s: 60 } },
        '.coding-agent.json has a setup, which runs only on the docker backend (its only network is an egress proxy): add --backend docker',
        ['--trust-repository'],
      ],
      [
        'egress without a setup',
        { schema_version: 1, egress: { allow: ['pypi.example.internal'] } },
        '.coding-agent.json: egress: egress applies to the setup phase only: give setup.commands, or leave egress out',
      ],
      [
        'a credential the repository defines itself (a variable, a header and a host of its choosing)',
        {
          schema_version: 1,
          setup,
          egress: {
            allow: ['pypi.example.internal'],
            credentials: [{ host: 'pypi.example.internal', header: 'X-Probe', env: 'SOME_VAR' }],
          },
        },
        ".coding-agent.json: egress.credentials.0: the name of a credential of the worker's credentials file (a repository names a credential; its variable, header and hosts are the operator's)",
      ],
      [
        'an address in the allow list',
        { schema_version: 1, setup, egress: { allow: ['127.0.0.1'] } },
        '.coding-agent.json: egress.allow.0: "127.0.0.1": a host name, not an address (its last label must start with a letter)',
      ],
      [
        'a wildcard over a public suffix',
        { schema_version: 1, setup, egress: { allow: ['*.co.uk'] } },
        '.coding-agent.json: egress.allow.0: "*.co.uk": broader than one registrable domain (co.uk is a public suffix: name the domain below it)',
      ],
      [
        "a credential the worker's credentials file does not have",
        { schema_version: 1, setup, egress: { allow: ['pypi.example.internal'], tls: 'intercept', credentials: ['private-index'] } },
        `.coding-agent.json: egress.credentials: the worker's credentials file has no credential "private-index" (it has: none)`,
      ],
    ].map(([what, settings, line, flags]) => [what, settings, line, flags ?? ['--backend', 'docker']]) as [
      string,
      unknown,
      string,
      string[],
    ][],
  )('is refused for %s in .coding-agent.json, naming the field, with nothing started', async (_what, settings, line, flags) => {
    // Read in the reading container (--backend docker), or on this machine when the user trusts it.
    const result = await refused(withSettings(settings), '--task', 'fix it', '--replay', REPLAY, ...flags);
    expect(result).toEqual({ code: 2, lines: [line], state: [] });
  });

  it('is refused for a path that is no repository, an unknown ref, a missing task and an undetectable test command', async () => {
    const plain = tempDir('plain');
    const { dir } = sampleRepo(LINKCHECK);
    const node = sampleRepo(LINKCHECK).dir;
    git(node, 'rm', '-q', '-r', '--cached', 'tests');
    writeFileSync(join(node, 'package.json'), JSON.stringify({ scripts: { test: 'mocha' } }));
    git(node, 'add', 'package.json');
    git(node, 'commit', '-q', '-m', 'a mocha project');
    const results = await Promise.all([
      refused(plain, '--task', 'fix it', '--replay', REPLAY, '--backend', 'docker'),
      refused(dir, '--task', 'fix it', '--base', 'v9.9', '--replay', REPLAY, '--backend', 'docker'),
      refused(dir, '--replay', REPLAY, '--backend', 'docker'),
      refused(dir, '--task-file', join(plain, 'missing.txt'), '--replay', REPLAY, '--backend', 'docker'),
      refused(node, '--task', 'fix it', '--replay', REPLAY, '--trust-repository'),
    ]);
    expect(results).toEqual([
      { code: 2, lines: [`${plain} is not a git repository (no .git folder, and not a bare repository)`], state: [] },
      { code: 2, lines: [`unknown ref "v9.9": no commit of that name in ${dir}`], state: [] },
      { code: 2, lines: ['a repository run needs its task: --task TEXT or --task-file FILE'], state: [] },
      { code: 2, lines: [`cannot read the task file ${join(plain, 'missing.txt')}: ENOENT`], state: [] },
      {
        code: 2,
        lines: [
          expect.stringMatching(/^package\.json's test script "mocha" is not `node --test \.\.\.`.*name one in \.coding-agent\.json/),
        ],
        state: [],
      },
    ]);
  });

  it('reads the settings of the base commit, not of the working tree, and records their digest', async () => {
    const bad = withSettings({ schema_version: 1, tests: { command: ['pytest'], format: 'nope', timeout_s: 1 } });
    const good = {
      schema_version: 1,
      tests: { command: ['python3', '-m', 'pytest', '-q', 'tests'], format: 'pytest', timeout_s: 90 },
      budgets: { max_turns: 7 },
    };
    writeFileSync(join(bad, '.coding-agent.json'), JSON.stringify(good)); // fixed in the working tree only
    const check = (base?: string) => checkRepositoryRun({ path: bad, task: 't', base, settings: readSettings(), read: 'host' });
    await expect(check()).rejects.toThrow(/tests\.format/);
    git(bad, 'commit', '-q', '-am', 'valid settings');
    const checked = await check();
    expect(checked.facts).toMatchObject({
      tests_source: 'settings',
      tests: good.tests,
      settings_digest: expect.stringMatching(/^[0-9a-f]{64}$/),
    });
    // The commit before still has the bad file: --base picks the tree, and so the settings.
    await expect(check('HEAD~1')).rejects.toThrow(/tests\.format/);
  });
});
