/**
 * What the setup-phase tests and the bench's setup section need of the world, all on this
 * machine: HTTP servers that stand for upstream hosts (a package index serving a wheel the test
 * builds, a host that must be refused), the hosts file that makes their test names resolve, for
 * the egress proxy only, to this machine's engine bridge address, and repositories whose settings
 * name a setup. No name here is public, and none is resolved by anything but the proxy's hosts
 * file.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createTlsServer } from 'node:https';
import { join } from 'node:path';
import Dockerode from 'dockerode';
import type { OperatorCredential } from '../../core/egress';
import { git } from './git';
import { tempDir } from './run-dir';

/** Test names of upstream hosts; `.test` is reserved (RFC 6761), and only the proxy's hosts file knows them. */
export const INDEX_HOST = 'pypi.egress.test';
export const BLOCKED_HOST = 'blocked.egress.test';
export const PIP_IMAGE = 'coding-agent-sandbox-pip:1';
/** The images an operator lets repositories name, with the pip image the repositories here name. */
export const allowingPip = (allowed: string[]): { allowedImages: string[] } => ({ allowedImages: [...allowed, PIP_IMAGE] });

/** The address of this machine as a container on the engine's default bridge sees it (the bridge's gateway). */
export async function bridgeGateway(): Promise<string> {
  const info = (await new Dockerode().getNetwork('bridge').inspect()) as { IPAM?: { Config?: { Gateway?: string; Subnet?: string }[] } };
  const config = info.IPAM?.Config?.[0];
  const gateway = config?.Gateway ?? config?.Subnet?.replace(/\.0\/\d+$/, '.1');
  if (!gateway) throw new Error('the engine has no default bridge gateway');
  return gateway;
}

/** A hosts file naming the test hosts at `address`, and each `[name, address]` of `more`: the proxy's only way to resolve. */
export function hostsFile(address: string, more: [string, string][] = []): string {
  const file = join(tempDir('egress-hosts'), 'hosts');
  writeFileSync(file, [[INDEX_HOST, address], [BLOCKED_HOST, address], ...more].map(([name, at]) => `${at} ${name}\n`).join(''));
  return file;
}

/**
 * The worker settings of an operator whose upstream hosts are on this machine: the test names in
 * the hosts file, and the bridge address opened (AGENT_EGRESS_OPEN_CIDRS), as an operator opens
 * the range of a private registry. Without the opening the proxy refuses that address.
 */
export async function localUpstreamSettings(): Promise<{ egressHostsFile: string; egressOpenCidrs: string[] }> {
  const gateway = await bridgeGateway();
  return { egressHostsFile: hostsFile(gateway), egressOpenCidrs: [`${gateway}/32`] };
}

/** The operator's credentials file (AGENT_CREDENTIALS_FILE) with these credentials, in a folder of its own. */
export function credentialsFile(credentials: OperatorCredential[]): string {
  const file = join(tempDir('egress-credentials'), 'credentials.json');
  writeFileSync(file, JSON.stringify({ schema_version: 1, credentials }, null, 2));
  return file;
}

/** A pure-Python wheel with one module, built by the host's python3 (zipfile, RECORD with hashes). */
export function buildWheel(name: string, version: string, moduleText: string): { file: string; bytes: Buffer } {
  const dir = tempDir('wheel');
  const script = `
import base64, hashlib, sys, zipfile
name, version, text, out = sys.argv[1:5]
dist = f"{name}-{version}.dist-info"
files = {f"{name}/__init__.py": text,
         f"{dist}/METADATA": f"Metadata-Version: 2.1\\nName: {name}\\nVersion: {version}\\n",
         f"{dist}/WHEEL": "Wheel-Version: 1.0\\nGenerator: egress-test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"}
record = []
with zipfile.ZipFile(out, "w") as z:
    for path, body in files.items():
        data = body.encode()
        z.writestr(path, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    z.writestr(f"{dist}/RECORD", "\\n".join(record) + "\\n")
`;
  const file = join(dir, `${name}-${version}-py3-none-any.whl`);
  execFileSync('python3', ['-c', script, name, version, moduleText, file]);
  return { file, bytes: readFileSync(file) };
}

export interface SeenRequest {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
}

/** An upstream HTTP server on every address of this machine (the proxy reaches it through the bridge). */
export interface Upstream {
  port: number;
  requests: SeenRequest[];
  close(): Promise<void>;
}

/** A certificate authority of the test's own and a server certificate it signed for `host` (openssl on this machine). */
export interface TestCertificates {
  caFile: string;
  key: string;
  cert: string;
}

export function testCertificates(host: string): TestCertificates {
  const dir = tempDir('egress-tls');
  const ssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
  ssl(
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-days',
    '2',
    '-subj',
    '/CN=egress test upstream CA',
    '-keyout',
    'ca.key',
    '-out',
    'ca.pem',
  );
  ssl('req', '-newkey', 'rsa:2048', '-nodes', '-subj', `/CN=${host}`, '-keyout', 'server.key', '-out', 'server.csr');
  writeFileSync(join(dir, 'ext'), `subjectAltName=DNS:${host}\n`);
  ssl(
    'x509',
    '-req',
    '-in',
    'server.csr',
    '-CA',
    'ca.pem',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-days',
    '2',
    '-extfile',
    'ext',
    '-out',
    'server.pem',
  );
  return {
    caFile: join(dir, 'ca.pem'),
    key: readFileSync(join(dir, 'server.key'), 'utf8'),
    cert: readFileSync(join(dir, 'server.pem'), 'utf8'),
  };
}

function listen(
  handle: (req: SeenRequest) => { status: number; body: Buffer | string; type?: string },
  tls?: TestCertificates,
): Promise<Upstream> {
  const requests: SeenRequest[] = [];
  const serve = (req: IncomingMessage, res: ServerResponse) => {
    const seen = { method: req.method ?? '', url: req.url ?? '', headers: req.headers };
    requests.push(seen);
    req.resume();
    req.on('end', () => {
      const answer = handle(seen);
      res.writeHead(answer.status, { 'content-type': answer.type ?? 'text/plain' });
      res.end(answer.body);
    });
  };
  const server: Server = tls ? createTlsServer({ key: tls.key, cert: tls.cert }, serve) : createServer(serve);
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '0.0.0.0', () => {
      const { port } = server.address() as { port: number };
      resolve({
        port,
        requests,
        close: () =>
          new Promise<void>((r) => {
            server.close(() => r());
            server.closeAllConnections();
          }),
      });
    });
  });
}

/**
 * A simple package index (PEP 503) of one wheel: `/simple/<name>/` links it, `/files/<wheel>`
 * serves it. With `requireHeader`, every request without exactly that header is answered 401;
 * with `tls`, it speaks HTTPS with that certificate.
 */
export function packageIndex(
  wheels: { name: string; file: string; bytes: Buffer }[],
  requireHeader?: { name: string; value: string },
  tls?: TestCertificates,
): Promise<Upstream> {
  return listen((req) => {
    if (requireHeader && req.headers[requireHeader.name.toLowerCase()] !== requireHeader.value)
      return { status: 401, body: 'unauthorized\n' };
    for (const w of wheels) {
      const base = w.file.split('/').pop()!;
      if (req.url === `/simple/${w.name}/`)
        return { status: 200, type: 'text/html', body: `<!DOCTYPE html><html><body><a href="/files/${base}">${base}</a></body></html>\n` };
      if (req.url === `/files/${base}`) return { status: 200, type: 'application/octet-stream', body: w.bytes };
    }
    return { status: 404, body: 'not found\n' };
  }, tls);
}

/** A server that answers everything: it stands for a host the allow list leaves out. */
export const plainServer = () => listen(() => ({ status: 200, body: 'reached\n' }));

/**
 * A git repository of a small Python project whose tests import `greetlib`, with settings that
 * name the pip image, the tests, and `settings` (setup, egress) on top.
 */
export function pythonRepo(settings: Record<string, unknown>, extra: Record<string, string> = {}): { dir: string; head: string } {
  const dir = join(tempDir('egress-repo'), 'greeter');
  mkdirSync(join(dir, 'tests'), { recursive: true });
  writeFileSync(join(dir, 'greeter.py'), 'import greetlib\n\n\ndef welcome(name):\n    return greetlib.greet(name) + "!"\n');
  writeFileSync(
    join(dir, 'tests', 'test_greeter.py'),
    'import greeter\n\n\ndef test_welcome():\n    assert greeter.welcome("setup") == "hello setup!"\n',
  );
  writeFileSync(
    join(dir, '.coding-agent.json'),
    JSON.stringify(
      {
        schema_version: 1,
        image: PIP_IMAGE,
        tests: { command: ['python3', '-m', 'pytest', '-q', '-p', 'no:cacheprovider', 'tests'], format: 'pytest', timeout_s: 60 },
        ...settings,
      },
      null,
      2,
    ),
  );
  for (const [path, text] of Object.entries(extra)) {
    mkdirSync(join(dir, path, '..'), { recursive: true });
    writeFileSync(join(dir, path), text);
  }
  git(dir, 'init', '-q', '-b', 'main');
  git(dir, 'add', '-A');
  git(dir, 'commit', '-q', '-m', 'greeter');
  return { dir, head: git(dir, 'rev-parse', 'HEAD').trim() };
}

/** The replay of a run that changes nothing: the verifier then judges the setup's work alone. */
export function finalOnlyReplay(): string {
  const file = join(tempDir('replay'), 'final-only.json');
  writeFileSync(
    file,
    JSON.stringify({
      schema_version: 1,
      decisions: [{ kind: 'final', text: 'Nothing to change: the tests pass once the dependencies are installed.' }],
    }),
  );
  return file;
}
