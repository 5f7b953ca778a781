/**
 * Configuration read once: the settings module's table of variables is docs/configuration.md's, every field
 * is read from exactly one variable with its default, malformed values stop with the variable's
 * name, and no module outside host/settings.ts reads a setting from the environment.
 */
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PROJECT_ROOT, PUBLIC_BASE_URLS, readCredential, readSettings, replayTrusted, VARIABLES, variablesTable } from '../host/settings';
import { hostPath, toolsBinDir } from '../host/tools-env';
import { temporalBinary } from '../host/temporal-bin';
import { tempDir } from './helpers/run-dir';

describe('the settings module', () => {
  it('is exactly the table of variables in docs/configuration.md, row for row', () => {
    const readme = readFileSync(join(PROJECT_ROOT, 'docs', 'configuration.md'), 'utf8');
    const table = variablesTable();
    // On a mismatch, the message shows the table to paste into docs/configuration.md.
    expect({ inReadme: readme.includes(`\n${table}\n`), table }).toEqual({ inReadme: true, table });
    expect(readme.split('| variable | default | meaning |').length - 1).toBe(1);
  });

  it('names each variable once, and every variable in the table is one the module reads', () => {
    const names = Object.values(VARIABLES).map((v) => v.name);
    expect(new Set(names).size).toBe(names.length);
    expect(names).toEqual(
      expect.arrayContaining([
        'TEMPORAL_ADDRESS',
        'TEMPORAL_NAMESPACE',
        'AGENT_PRICES_FILE',
        'AGENT_MAX_CACHED_WORKFLOWS',
        'AGENT_SANDBOX_IMAGE',
        'DOCKER_HOST',
        'AGENT_TOOLS_DIR',
        'TEMPORAL_BIN',
        'AGENT_WEB_UI_URL',
        'AGENT_FAULT',
      ]),
    );
  });

  it('gives every field its default from an empty environment', () => {
    expect(readSettings({})).toEqual({
      temporalAddress: null,
      namespace: null,
      temporalProfile: null,
      temporalConfigFile: null,
      temporalApiKey: null,
      temporalTls: {},
      temporalGrpcMeta: {},
      taskQueue: 'coding-agent',
      deploymentName: 'coding-agent',
      drainCheckS: 60,
      stateDir: join(PROJECT_ROOT, '.agent-state'),
      providersFile: join(PROJECT_ROOT, '.agent-state', 'providers.json'),
      credentialsFile: join(PROJECT_ROOT, '.agent-state', 'credentials.json'),
      promptsDir: join(PROJECT_ROOT, 'dist', 'prompts'),
      devServerPort: 7233,
      devUiPort: 8233,
      trustedReplayDirs: [join(PROJECT_ROOT, 'fixtures')],
      webUiUrl: null,
      temporalBin: null,
      toolsDir: join(PROJECT_ROOT, '.agent-state', 'tools'),
      path: '/usr/local/bin:/usr/bin:/bin',
      pricesFile: null,
      maxCachedWorkflows: 100,
      workspaceBytes: 2 * 1024 ** 3,
      diskFullWaitS: 600,
      sandboxImage: 'coding-agent-sandbox:1',
      gitImage: 'coding-agent-git:1',
      allowedImages: ['coding-agent-sandbox:1', 'coding-agent-setup:*'],
      repositoryLimits: {
        files: 100_000,
        bytes: 1024 ** 3,
        blob_bytes: 100 * 1024 ** 2,
        path_bytes: 4096,
        depth: 64,
        new_files: 50_000,
        idle_s: 5,
        read_s: 600,
      },
      dockerHost: null,
      proxyImage: 'coding-agent-proxy:2',
      egressNetwork: 'bridge',
      egressHostsFile: null,
      egressUpstreamCa: null,
      egressOpenCidrs: [],
      egressConnectPorts: [],
      openaiBaseUrl: PUBLIC_BASE_URLS.openai,
      anthropicBaseUrl: PUBLIC_BASE_URLS.anthropic,
      otlpEndpoint: null,
      otlpHeaders: {},
      metricsAddress: null,
      fault: null,
      faultHoldMs: 0,
      faultCount: 1,
      faultDelayMs: 0,
      backgroundWorker: false,
      allowLocal: false,
      maxBudgets: { max_turns: 2000, max_tool_calls: 5000, deadline_s: 86400, call_timeout_s: 3600, approval_timeout_s: 2592000 },
    });
  });

  it("allows local runs on the background worker and where the operator says so, and merges the operator's maximums into the defaults", () => {
    expect(readSettings({ AGENT_BACKGROUND_WORKER: '1' }).allowLocal).toBe(true);
    expect(readSettings({ AGENT_BACKGROUND_WORKER: '1', AGENT_ALLOW_LOCAL: '0' }).allowLocal).toBe(false);
    expect(readSettings({ AGENT_ALLOW_LOCAL: '1' }).allowLocal).toBe(true);
    expect(() => readSettings({ AGENT_ALLOW_LOCAL: 'yes' })).toThrow('AGENT_ALLOW_LOCAL must be 1 or 0, not "yes"');
    expect(readSettings({ AGENT_MAX_BUDGETS: '{"max_turns": 50, "max_cost_usd": 2.5}' }).maxBudgets).toEqual({
      max_turns: 50,
      max_tool_calls: 5000,
      deadline_s: 86400,
      call_timeout_s: 3600,
      approval_timeout_s: 2592000,
      max_cost_usd: 2.5,
    });
    expect(() => readSettings({ AGENT_MAX_BUDGETS: '{"max_turns": 500000}' })).toThrow(
      'AGENT_MAX_BUDGETS: max_turns: Too big: expected number to be <=100000',
    );
    expect(() => readSettings({ AGENT_MAX_BUDGETS: '{"turns": 5}' })).toThrow(/AGENT_MAX_BUDGETS: .*Unrecognized key: "turns"/);
    expect(() => readSettings({ AGENT_MAX_BUDGETS: 'max_turns=5' })).toThrow(/AGENT_MAX_BUDGETS must be a JSON object of budgets/);
  });

  it("reads the operator's repository limits over their defaults and the images a repository may name, refusing what is not one", () => {
    expect(readSettings({ AGENT_REPOSITORY_LIMITS: '{"files": 200000, "idle_s": 10}' }).repositoryLimits).toMatchObject({
      files: 200_000,
      idle_s: 10,
      bytes: 1024 ** 3,
      new_files: 50_000,
    });
    expect(() => readSettings({ AGENT_REPOSITORY_LIMITS: '{"inodes": 5}' })).toThrow(
      'AGENT_REPOSITORY_LIMITS: unknown field "inodes" (known: files, bytes, blob_bytes, path_bytes, depth, new_files, idle_s, read_s)',
    );
    expect(() => readSettings({ AGENT_REPOSITORY_LIMITS: '{"files": 0}' })).toThrow(
      'AGENT_REPOSITORY_LIMITS.files must be a positive integer, not 0',
    );
    expect(() => readSettings({ AGENT_REPOSITORY_LIMITS: 'files=5' })).toThrow(/AGENT_REPOSITORY_LIMITS must be a JSON object of limits/);
    expect(readSettings({ AGENT_ALLOWED_IMAGES: 'team/base:2, team/tools:*' }).allowedImages).toEqual(['team/base:2', 'team/tools:*']);
    expect(readSettings({ AGENT_SANDBOX_IMAGE: 'mine:3' }).allowedImages).toEqual(['mine:3', 'coding-agent-setup:*']);
    expect(() => readSettings({ AGENT_ALLOWED_IMAGES: 'ok:1,has space' })).toThrow(/AGENT_ALLOWED_IMAGES must be image references/);
  });

  it('reads each variable into its typed field; an empty value is unset, except for trusted folders', () => {
    const s = readSettings({
      TEMPORAL_ADDRESS: 'cluster:7233',
      AGENT_STATE_DIR: '/srv/agent',
      AGENT_DEV_SERVER_PORT: '17233',
      AGENT_MAX_CACHED_WORKFLOWS: '0',
      AGENT_WORKSPACE_BYTES: '1048576',
      AGENT_DISK_FULL_WAIT_S: '0',
      AGENT_TRUSTED_REPLAY_DIRS: '',
      AGENT_WEB_UI_URL: '',
      AGENT_FAULT: 'after_rename',
      AGENT_BACKGROUND_WORKER: '1',
      OPENAI_BASE_URL: 'http://127.0.0.1:9/v1',
      AGENT_EGRESS_HOSTS: '/etc/agent/egress-hosts',
      AGENT_EGRESS_NETWORK: '',
      AGENT_EGRESS_OPEN_CIDRS: '127.20.0.0/16, 127.30.0.7,::1',
      AGENT_EGRESS_CONNECT_PORTS: '8443,9443',
      OTEL_EXPORTER_OTLP_ENDPOINT: 'https://collector.example:4318/',
      OTEL_EXPORTER_OTLP_HEADERS: 'Authorization=Bearer%20abc, x-team = core ',
      AGENT_METRICS_ADDRESS: '9464',
    });
    expect(s).toMatchObject({
      egressHostsFile: '/etc/agent/egress-hosts',
      egressNetwork: 'bridge',
      egressOpenCidrs: ['127.20.0.0/16', '127.30.0.7/32', '::1/128'],
      egressConnectPorts: [8443, 9443],
      temporalAddress: 'cluster:7233',
      stateDir: '/srv/agent',
      providersFile: '/srv/agent/providers.json',
      credentialsFile: '/srv/agent/credentials.json',
      devServerPort: 17233,
      maxCachedWorkflows: 0,
      workspaceBytes: 1048576,
      diskFullWaitS: 0,
      trustedReplayDirs: [],
      webUiUrl: null,
      fault: 'after_rename',
      backgroundWorker: true,
      openaiBaseUrl: 'http://127.0.0.1:9/v1',
      otlpEndpoint: 'https://collector.example:4318',
      otlpHeaders: { authorization: 'Bearer abc', 'x-team': 'core' },
      metricsAddress: '127.0.0.1:9464',
    });
    expect(readSettings({ AGENT_METRICS_ADDRESS: '0.0.0.0:9464' }).metricsAddress).toBe('0.0.0.0:9464');
    expect(readSettings({ AGENT_METRICS_ADDRESS: '[::1]:9464' }).metricsAddress).toBe('[::1]:9464');
    expect(replayTrusted(readSettings({}), join(PROJECT_ROOT, 'fixtures', 'x', 'replays', 'canonical.json'), false)).toBe(true);
    expect(replayTrusted(s, join(PROJECT_ROOT, 'fixtures', 'x', 'replays', 'canonical.json'), false)).toBe(false);
  });

  it('stops on a malformed value with the name of its variable', () => {
    expect(() => readSettings({ AGENT_DEV_UI_PORT: 'eighty' })).toThrow(
      /AGENT_DEV_UI_PORT must be an integer from 1 to 65535, not "eighty"/,
    );
    expect(() => readSettings({ AGENT_MAX_CACHED_WORKFLOWS: '-1' })).toThrow(/AGENT_MAX_CACHED_WORKFLOWS/);
    expect(() => readSettings({ AGENT_WORKSPACE_BYTES: '0' })).toThrow(/AGENT_WORKSPACE_BYTES must be an integer from 1 to /);
    expect(() => readSettings({ AGENT_DISK_FULL_WAIT_S: '10m' })).toThrow(
      /AGENT_DISK_FULL_WAIT_S must be an integer from 0 to 604800, not "10m"/,
    );
    expect(() => readSettings({ AGENT_DEPLOYMENT_NAME: 'team.agent' })).toThrow(
      /AGENT_DEPLOYMENT_NAME must be letters, digits, '-' or '_' \(at most 200\), not "team.agent"/,
    );
    expect(() => readSettings({ AGENT_DRAIN_CHECK_S: '0' })).toThrow(/AGENT_DRAIN_CHECK_S must be an integer from 1 to 86400, not "0"/);
    expect(() => readSettings({ AGENT_FAULT: 'after_lunch' })).toThrow(
      /AGENT_FAULT must be one of before_write, .*after_model_response, .*not "after_lunch"/,
    );
    expect(() => readSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' })).toThrow(
      /OTEL_EXPORTER_OTLP_ENDPOINT must be an http:\/\/ or https:\/\/ URL/,
    );
    expect(() => readSettings({ AGENT_METRICS_ADDRESS: 'localhost:9464' })).toThrow(/AGENT_METRICS_ADDRESS must be PORT or IP:PORT/);
    expect(() => readSettings({ AGENT_METRICS_ADDRESS: '70000' })).toThrow(/AGENT_METRICS_ADDRESS/);
    expect(() => readSettings({ AGENT_EGRESS_OPEN_CIDRS: '127.20.0.0/16,registry.example' })).toThrow(
      /AGENT_EGRESS_OPEN_CIDRS must be CIDRs such as .*, not "registry\.example"/,
    );
    expect(() => readSettings({ AGENT_EGRESS_OPEN_CIDRS: '127.0.0.0/33' })).toThrow(/AGENT_EGRESS_OPEN_CIDRS/);
    expect(() => readSettings({ AGENT_EGRESS_CONNECT_PORTS: '443,0' })).toThrow(
      /AGENT_EGRESS_CONNECT_PORTS must be ports \(1 to 65535\) separated by commas, not "0"/,
    );
    // A header value may be a key: the error names the header, never the value.
    const bad = (() => {
      try {
        readSettings({ OTEL_EXPORTER_OTLP_HEADERS: 'api-key=sk-SECRET%zz' });
      } catch (err) {
        return (err as Error).message;
      }
      return '';
    })();
    expect(bad).toMatch(/OTEL_EXPORTER_OTLP_HEADERS: the value of api-key is not valid percent-encoding/);
    expect(bad).not.toContain('SECRET');
  });

  it('reads a key variable by the name an endpoint gives, an empty one as unset', () => {
    expect(readCredential('SOME_KEY', { SOME_KEY: 'sk-1' })).toBe('sk-1');
    expect(readCredential('SOME_KEY', { SOME_KEY: '' })).toBeUndefined();
    expect(readCredential('SOME_KEY', {})).toBeUndefined();
  });

  it('finds the tools and the temporal CLI from settings, not from the environment', () => {
    const settings = { toolsDir: '/nonexistent/tools', path: '/opt/a:/opt/b', temporalBin: '/opt/temporal' };
    expect(toolsBinDir(settings)).toBe('/nonexistent/tools/bin');
    expect(hostPath(settings)).toBe('/opt/a:/opt/b'); // no tools environment there: PATH alone
    const own = readSettings();
    expect(hostPath(own).startsWith(`${toolsBinDir(own)}:`)).toBe(true);
    expect(temporalBinary(settings)).toBe('/opt/temporal');
  });

  it('looks for the temporal CLI in files only: the tools environment, then PATH in order, else a precise error', () => {
    const dir = tempDir('agent-temporal-bin');
    const [tools, a, b, c] = ['tools', 'a', 'b', 'c'].map((name) => join(dir, name));
    for (const d of [join(tools, 'bin'), a, b, join(c, 'temporal')]) mkdirSync(d, { recursive: true });
    writeFileSync(join(a, 'temporal'), 'not executable');
    writeFileSync(join(b, 'temporal'), '#!/bin/sh\n', { mode: 0o755 });
    // Neither a file without the execute bit nor a folder of that name is taken.
    const settings = { toolsDir: tools, path: `${a}:${c}:${b}`, temporalBin: null };
    expect(temporalBinary(settings)).toBe(join(b, 'temporal'));
    writeFileSync(join(tools, 'bin', 'temporal'), '#!/bin/sh\n', { mode: 0o755 });
    expect(temporalBinary(settings)).toBe(join(tools, 'bin', 'temporal'));
    expect(() => temporalBinary({ ...settings, toolsDir: join(dir, 'none'), path: a })).toThrow(/temporal CLI was not found/);
    rmSync(dir, { recursive: true, force: true });
  });
});

describe('the environment outside the settings module', () => {
  /**
   * Lines of the harness's own sources (not tests, not scripts) that read process.env. Each allowed
   * one passes the environment on whole to a child process or plants the probe's secret; none
   * reads a setting.
   */
  const ALLOWED = [
    /^host\/settings\.ts:/,
    /^host\/temporal-server\.ts:.*env: \{ \.\.\.process\.env, TEMPORAL_VERSION_CHECK_DISABLED/,
    /^host\/background-worker\.ts:.*ensureBackgroundWorker\(settings: Settings, env: NodeJS\.ProcessEnv = process\.env\)/,
    /^sandbox\/probe\/isolation\.ts:.*process\.env\[SECRET_NAME\]/,
    // git gets the environment whole, but for the GIT_* variables that would redirect it.
    /^host\/git\.ts:.*Object\.fromEntries\(Object\.entries\(process\.env\)\.filter\(\(\[k\]\) => !k\.startsWith\('GIT_'\)\)\)/,
  ];

  const sources = (dir: string): string[] =>
    readdirSync(join(PROJECT_ROOT, dir), { withFileTypes: true }).flatMap((e) =>
      e.isDirectory() ? sources(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
    );

  it('is read nowhere else in the harness', () => {
    const lines = ['core', 'host', 'tools', 'sandbox', 'models', 'activities', 'worker', 'workflows', 'client']
      .flatMap(sources)
      .flatMap((file) =>
        readFileSync(join(PROJECT_ROOT, file), 'utf8')
          .split('\n')
          .map((line, i) => `${file}:${i + 1}:${line}`)
          .filter((l) => l.includes('process.env')),
      );
    expect(lines.length).toBeGreaterThan(0); // the module itself
    expect(lines.filter((l) => !ALLOWED.some((re) => re.test(l)))).toEqual([]);
  });
});
