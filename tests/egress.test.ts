/**
 * The setup phase and its egress proxy (SPEC section 11), on the real engine, with squid in its
 * own container. Upstream hosts are servers of this test on this machine; the proxy resolves
 * their test names from the hosts file the worker's settings name (AGENT_EGRESS_HOSTS), and
 * nothing else resolves anything.
 */
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { RunInput } from '../core/contracts';
import type { TraceEvent } from '../core/trace';
import { readSettings } from '../host/settings';
import { bridgeGateway, buildWheel, finalOnlyReplay, hostsFile, INDEX_HOST, packageIndex, plainServer, pythonRepo, type Upstream } from './helpers/egress';
import { runOnce, startServer } from './helpers/temporal';

jest.setTimeout(240_000);

let env: TestWorkflowEnvironment;
let gateway: string;
let hosts: string;
let index: Upstream;
let blocked: Upstream;
const wheel = buildWheel('greetlib', '1.0', 'def greet(name):\n    return "hello " + name\n');
const replay = finalOnlyReplay();

beforeAll(async () => {
  env = await startServer();
  gateway = await bridgeGateway();
  hosts = hostsFile(gateway);
  index = await packageIndex([{ name: 'greetlib', ...wheel }]);
  blocked = await plainServer();
});

afterAll(async () => {
  await index?.close();
  await blocked?.close();
  await env?.teardown();
});

const settings = () => ({ ...readSettings(), egressHostsFile: hosts });

function repoInput(repo: { dir: string; head: string }): RunInput {
  return {
    repo: { path: repo.dir, base_commit: repo.head, task: 'Make the tests pass.' },
    source: { kind: 'replay', path: replay, trusted: true },
    backend: 'docker',
    approver: 'policy:approve-writable',
  };
}

const pipInstall = (port: number) => ['pip', 'install', '--no-cache-dir', '--break-system-packages', '--disable-pip-version-check', '--index-url', `http://${INDEX_HOST}:${port}/simple/`, '--trusted-host', INDEX_HOST, 'greetlib'];
const ofType = (trace: TraceEvent[], type: string) => trace.filter((e) => e.type === type);

describe('a setup phase behind the egress proxy', () => {
  it('installs a package only the local index has, through the proxy: the run completes with egress allowed > 0 and denied = 0', async () => {
    const repo = pythonRepo({ setup: { commands: [pipInstall(index.port)], timeout_s: 120 }, egress: { allow: [INDEX_HOST] } });
    const before = index.requests.length;
    const { outcome, trace } = await runOnce(env, repoInput(repo), { settings: settings() });
    if (outcome.record.status !== 'completed') console.log(JSON.stringify({ detail: outcome.state.detail, trace }, null, 1).slice(0, 20000));
    expect(outcome.record).toMatchObject({ status: 'completed', reason: null, candidate_tests: { discovered: 1, passed: 1, failed: 0 } });
    expect(outcome.record.egress!.allowed).toBeGreaterThan(0);
    expect(outcome.record.egress!.denied).toBe(0);
    const allowed = ofType(trace, 'egress_allowed').map((e) => e.data as { host: string; port: number; method: string; bytes: number });
    expect(allowed.length).toBe(outcome.record.egress!.allowed);
    expect(allowed.every((e) => e.host === INDEX_HOST && e.port === index.port && e.method === 'GET' && e.bytes > 0)).toBe(true);
    expect(index.requests.slice(before).map((r) => r.url)).toEqual(['/simple/greetlib/', `/files/${wheel.file.split('/').pop()}`]);
    const isolation = ofType(trace, 'isolation_checked').map((e) => e.data as { phase?: string; verified: boolean; checks: Record<string, { ok: boolean }> });
    expect(isolation.map((i) => [i.phase ?? 'before_setup', i.verified])).toEqual([
      ['before_setup', true],
      ['setup', true],
      ['after_setup', true],
    ]);
    expect(ofType(trace, 'setup_command').map((e) => e.data)).toEqual([{ argv: pipInstall(index.port), exit_code: 0, timed_out: false }]);
  });
});
