/**
 * Connecting like the `temporal` CLI: a temporal.toml profile with TLS (the test's own
 * authorities, a client certificate) and an API key, through a TLS terminator in front of a dev
 * server that the project's launcher started. The worker process and the command line connect
 * through the profile and the canonical run completes; a wrong CA, an unknown profile, a wrong
 * key and an address that does not answer each end with one line saying which (exit 2); the key
 * is in no output, log, history or stored file. A client connection closed while a call on it
 * waits to be retried ends the call, nothing more. Then the rules of the embedded default.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { closeSync, mkdirSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { buildId } from '../host/build';
import { ConnectionError, resolveTarget, type TemporalSettings } from '../host/connection';
import { readSettings } from '../host/settings';
import { fragments, historyJson, leaks } from './helpers/leaks';
import { freePort, PROJECT_ROOT, tempDir } from './helpers/run-dir';
import { CANONICAL_RECORD, killed, startServer, uniqueQueue, waitFor } from './helpers/temporal';
import { makePki, startTlsTerminator, type TestPki, type TlsTerminator } from './helpers/tls-terminator';

const CLI = join(PROJECT_ROOT, 'dist', 'client', 'cli.js');
/** A distinctive API key: it must reach the terminator and nothing else. */
const KEY = 'tk-LEAKCANARY-3a9f1c7e5d2b';

/** This process's environment without any TEMPORAL_* connection variable (the test sets its own). */
function cleanEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith('TEMPORAL_') || name === 'TEMPORAL_BIN'));
  return { ...env, ...extra };
}

function toml(profiles: Record<string, { address: string; api_key?: string; tls?: Record<string, string> }>): string {
  const lines: string[] = [];
  for (const [name, p] of Object.entries(profiles)) {
    lines.push(`[profile.${name}]`, `address = ${JSON.stringify(p.address)}`, 'namespace = "default"');
    if (p.api_key) lines.push(`api_key = ${JSON.stringify(p.api_key)}`);
    if (p.tls) {
      lines.push(`[profile.${name}.tls]`);
      for (const [k, v] of Object.entries(p.tls)) lines.push(`${k} = ${JSON.stringify(v)}`);
    }
    lines.push('');
  }
  return lines.join('\n');
}

describe('a cluster behind TLS and an API key, reached through a temporal.toml profile', () => {
  let env: TestWorkflowEnvironment;
  let pki: TestPki;
  let terminator: TlsTerminator;
  let configFile: string;
  let stateDir: string;
  let taskQueue: string;
  let worker: ChildProcess | null = null;
  let workerLog: string;
  const outputs: Record<string, string> = {};

  beforeAll(async () => {
    env = await startServer();
    const dir = tempDir('pki');
    pki = makePki(dir);
    terminator = await startTlsTerminator({ upstream: env.address, pki, apiKey: KEY });
    const tls = {
      server_ca_cert_path: pki.caCert,
      client_cert_path: pki.clientCert,
      client_key_path: pki.clientKey,
      server_name: 'localhost',
    };
    configFile = join(dir, 'temporal.toml');
    writeFileSync(
      configFile,
      toml({
        secure: { address: terminator.address, api_key: KEY, tls },
        'wrong-ca': { address: terminator.address, api_key: KEY, tls: { ...tls, server_ca_cert_path: pki.strangerCaCert } },
        'wrong-key': { address: terminator.address, api_key: 'tk-not-the-right-key-0000', tls },
        'no-client-cert': { address: terminator.address, api_key: KEY, tls: { server_ca_cert_path: pki.caCert, server_name: 'localhost' } },
        closed: { address: `127.0.0.1:${await freePort()}` },
      }),
    );
    stateDir = tempDir('tls-state');
    taskQueue = uniqueQueue('tls');
    workerLog = join(stateDir, 'worker.log');
  });

  afterAll(async () => {
    if (worker && worker.exitCode === null) {
      worker.kill('SIGTERM');
      await killed(worker);
    }
    await terminator?.close();
    await env?.teardown();
  });

  const shellEnv = (profile: string, extra: Record<string, string> = {}) =>
    cleanEnv({
      TEMPORAL_CONFIG_FILE: configFile,
      TEMPORAL_PROFILE: profile,
      AGENT_STATE_DIR: stateDir,
      AGENT_TASK_QUEUE: taskQueue,
      ...extra,
    });

  const cli = (label: string, profile: string, ...args: string[]) =>
    new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      execFile(
        process.execPath,
        [CLI, ...args],
        { env: shellEnv(profile), cwd: PROJECT_ROOT, maxBuffer: 16 * 1024 * 1024 },
        (err, stdout, stderr) => {
          outputs[`${label} stdout`] = stdout;
          outputs[`${label} stderr`] = stderr;
          resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
        },
      );
    });

  it('runs the canonical fixture with the worker and the command line connected through the profile', async () => {
    const log = openSync(workerLog, 'a');
    worker = spawn(process.execPath, [join(PROJECT_ROOT, 'dist', 'worker', 'main.js')], {
      env: shellEnv('secure'),
      cwd: PROJECT_ROOT,
      stdio: ['ignore', log, log],
    });
    closeSync(log);
    await waitFor(
      'the worker to poll through the terminator',
      async () => readFileSync(workerLog, 'utf8').includes('polling task queue'),
      60_000,
    );
    const started = readFileSync(workerLog, 'utf8');
    expect(started).toContain(`in namespace default on ${terminator.address} (`);
    expect(started).toContain(`; settings from profile 'secure' of ${configFile};`);

    const run = await cli(
      'run',
      'secure',
      'run',
      'fixtures/linkcheck-nested',
      '--replay',
      'fixtures/linkcheck-nested/replays/canonical.json',
      '--approver',
      'policy:approve-writable',
      '--wait',
      '--json',
      '--id',
      'tls-canonical',
    );
    expect(run.stderr).not.toMatch(/^error:/m);
    expect({ code: run.code, record: JSON.parse(run.stdout) }).toEqual({ code: 0, record: CANONICAL_RECORD });
    const status = await cli('status', 'secure', 'status', 'tls-canonical', '--json');
    expect(JSON.parse(status.stdout)).toMatchObject({ status: 'completed', counters: { writes: 2, receipts: 2 }, builds: [buildId()] });
    // Which build ran it: the worker's, as status shows it.
    expect((await cli('status text', 'secure', 'status', 'tls-canonical')).stdout).toContain(`\nran on build ${buildId()}\n`);
    // Everything went through TLS with the key: the terminator forwarded it all and refused nothing.
    expect(terminator.forwarded).toBeGreaterThan(20);
    expect(terminator.refused).toBe(0);
  });

  it.each([
    [
      'wrong-ca',
      'tls',
      /^error: TLS with Temporal at 127\.0\.0\.1:\d+ \(settings from profile 'wrong-ca' of .*temporal\.toml\) failed: the server's certificate is not signed by a certificate authority this connection trusts \(UNABLE_TO_VERIFY_LEAF_SIGNATURE\)/,
    ],
    [
      'no-client-cert',
      'tls',
      /^error: TLS with Temporal at .* failed: the server refused this connection's client certificate \(ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED\)/,
    ],
    [
      'wrong-key',
      'refused',
      /^error: Temporal at .*\(settings from profile 'wrong-key' of .*\) refused the connection: .*authentication credentials.*missing or wrong API key/,
    ],
    ['closed', 'unreachable', /^error: cannot reach Temporal at 127\.0\.0\.1:\d+ \(settings from profile 'closed' of .*\): ECONNREFUSED$/],
    [
      'nope',
      'config',
      /^error: unknown Temporal profile 'nope' \(TEMPORAL_PROFILE\): .*temporal\.toml has only 'closed', 'no-client-cert', 'secure', 'wrong-ca', 'wrong-key'$/,
    ],
  ])('profile %s: the command ends with exit 2 and one line saying which (%s)', async (profile, _fault, line) => {
    const refusedBefore = terminator.refused;
    const { code, stdout, stderr } = await cli(`status ${profile}`, profile, 'status', 'tls-canonical');
    expect({ code, stdout, lines: stderr.trimEnd().split('\n').length }).toEqual({ code: 2, stdout: '', lines: 1 });
    expect(stderr.trimEnd()).toMatch(line);
    if (profile === 'wrong-key') expect(terminator.refused).toBeGreaterThan(refusedBefore);
  });

  it('a worker with the wrong CA ends at once with the same line, exit 2', async () => {
    const child = spawn(process.execPath, [join(PROJECT_ROOT, 'dist', 'worker', 'main.js')], {
      env: shellEnv('wrong-ca'),
      cwd: PROJECT_ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr!.on('data', (d) => (stderr += d));
    await killed(child);
    outputs['worker wrong-ca stderr'] = stderr;
    expect({ code: child.exitCode, lines: stderr.trimEnd().split('\n').length }).toEqual({ code: 2, lines: 1 });
    expect(stderr).toMatch(
      /^TLS with Temporal at .* failed: the server's certificate is not signed by a certificate authority this connection trusts/,
    );
  });

  it('leaves the API key in no output, log, history or file of the state folder', async () => {
    const history = await historyJson(env.address, 'tls-canonical');
    expect(history).toContain('tls-canonical');
    const hits = leaks([KEY, ...fragments(KEY)], { texts: { ...outputs, history }, dirs: [stateDir], files: [workerLog] });
    expect(hits).toEqual([]);
  });

  // On the same dev server, straight (not through the terminator): a relay of the script's own is cut.
  const closeUnderRetry = (how: 'sdk' | 'ours', when: 'retry' | 'before' = 'retry') =>
    new Promise<unknown>((resolve, reject) =>
      execFile(
        process.execPath,
        [join(PROJECT_ROOT, 'dist', 'tests', 'helpers', 'close-under-retry.js'), env.address, how, when],
        (err, stdout) => (err ? reject(err) : resolve(JSON.parse(stdout))),
      ),
    );

  it("a client connection closed while a call on it waits to be retried ends the call with an error (connectClient), where the SDK's own retry threw from its timer and the call never answered", async () => {
    const [sdk, ours] = await Promise.all([closeUnderRetry('sdk'), closeUnderRetry('ours')]);
    expect(sdk).toEqual({ answer: 'no answer', uncaught: 'Channel has been shut down' });
    expect(ours).toEqual({ answer: 'rejected', uncaught: null });
  });

  it('a call made on a client connection already closed ends with an error, and nothing is thrown from a timer', async () => {
    const [sdk, ours] = await Promise.all([closeUnderRetry('sdk', 'before'), closeUnderRetry('ours', 'before')]);
    expect(sdk).toEqual({ answer: 'rejected', uncaught: null });
    expect(ours).toEqual({ answer: 'rejected', uncaught: null });
  });
});

describe('the embedded default, once profiles exist', () => {
  const dir = tempDir('envconfig');
  const file = join(dir, 'temporal.toml');
  writeFileSync(file, toml({ default: { address: 'cluster.example:7233' }, staging: { address: 'staging.example:7233', api_key: KEY } }));
  const xdg = join(dir, 'xdg');
  mkdirSync(join(xdg, 'temporalio'), { recursive: true });
  writeFileSync(join(xdg, 'temporalio', 'temporal.toml'), toml({ default: { address: 'xdg.example:7233' } }));
  const keyOnly = join(dir, 'key-only.toml');
  writeFileSync(keyOnly, '[profile.default]\napi_key = "tk-key-without-address"\n');
  const noProfiles = join(dir, 'empty.toml');
  writeFileSync(noProfiles, '# nothing here\n');
  const settings = (env: Record<string, string>): TemporalSettings => readSettings({ HOME: join(dir, 'home-without-config'), ...env });

  it('applies exactly when neither TEMPORAL_ADDRESS nor the selected profile gives an address', () => {
    expect(resolveTarget(settings({}))).toMatchObject({ address: null, namespace: 'default', options: {} });
    expect(resolveTarget(settings({ TEMPORAL_CONFIG_FILE: noProfiles }))).toMatchObject({ address: null });
    expect(resolveTarget(settings({ TEMPORAL_NAMESPACE: 'team' }))).toMatchObject({ address: null, namespace: 'team' });
    // The default profile of the file gives an address: a cluster.
    expect(resolveTarget(settings({ TEMPORAL_CONFIG_FILE: file }))).toMatchObject({
      address: 'cluster.example:7233',
      origin: `profile 'default' of ${file}`,
    });
    // The CLI's default location is read too ($XDG_CONFIG_HOME/temporalio/temporal.toml).
    expect(resolveTarget(settings({ XDG_CONFIG_HOME: xdg }))).toMatchObject({ address: 'xdg.example:7233' });
  });

  it('lets the variables override the profile, as the temporal CLI does', () => {
    const t = resolveTarget(
      settings({
        TEMPORAL_CONFIG_FILE: file,
        TEMPORAL_PROFILE: 'staging',
        TEMPORAL_ADDRESS: 'override.example:7233',
        TEMPORAL_NAMESPACE: 'ns1',
      }),
    );
    expect(t).toMatchObject({
      address: 'override.example:7233',
      namespace: 'ns1',
      origin: `profile 'staging' of ${file} and TEMPORAL_ADDRESS`,
      options: { apiKey: KEY, tls: true },
    });
    expect(t.origin).not.toContain(KEY);
  });

  it('refuses, in one line, what cannot work', () => {
    const fault = (env: Record<string, string>) => {
      try {
        resolveTarget(settings(env));
      } catch (err) {
        return err instanceof ConnectionError ? `${err.fault}: ${err.message}` : `not a ConnectionError: ${String(err)}`;
      }
      return 'no error';
    };
    expect(fault({ TEMPORAL_PROFILE: 'prod' })).toMatch(
      /^config: unknown Temporal profile 'prod' \(TEMPORAL_PROFILE\): there is no Temporal config file/,
    );
    expect(fault({ TEMPORAL_CONFIG_FILE: join(dir, 'missing.toml') })).toBe(
      `config: TEMPORAL_CONFIG_FILE names ${join(dir, 'missing.toml')}, which does not exist`,
    );
    expect(fault({ TEMPORAL_CONFIG_FILE: keyOnly })).toBe(
      `config: an API key but no address (from profile 'default' of ${keyOnly}): set the address (TEMPORAL_ADDRESS or the profile's address), or remove the key to use the embedded dev server`,
    );
    expect(fault({ TEMPORAL_API_KEY: KEY })).toMatch(/^config: an API key but no address \(from TEMPORAL_\* variables\)/);
    expect(fault({ TEMPORAL_ADDRESS: 'c:7233', TEMPORAL_TLS_SERVER_CA_CERT_PATH: join(dir, 'no-ca.pem') })).toBe(
      `config: the TLS file ${join(dir, 'no-ca.pem')} (server_ca_cert, from TEMPORAL_ADDRESS) does not exist`,
    );
    writeFileSync(join(dir, 'broken.toml'), '[profile.default\naddress = 1\n');
    expect(fault({ TEMPORAL_CONFIG_FILE: join(dir, 'broken.toml') })).toMatch(
      /^config: cannot read the Temporal config file .*broken\.toml: /,
    );
    for (const env of [
      { TEMPORAL_API_KEY: KEY },
      { TEMPORAL_CONFIG_FILE: file, TEMPORAL_PROFILE: 'nope', TEMPORAL_API_KEY: KEY },
    ] as Record<string, string>[])
      expect(fault(env)).not.toContain(KEY);
  });
});
