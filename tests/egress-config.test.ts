/**
 * The egress proxy's policy as text and its audit log as events (activities/setup/squid.ts), and
 * the allow list's host patterns (core/contracts.ts): pure, no engine.
 */
import { placeholder } from '../activities/setup';
import { headerValueProblem, parseAccessLine, squidConfig, type ProxyConfig } from '../activities/setup/squid';
import { fixtureSchema, hostMatches } from '../core/contracts';
import { linkcheckFixture } from './helpers/run-dir';

const base: ProxyConfig = {
  listen: '127.20.0.2',
  clients: '127.20.0.0/16',
  egress: { allow: ['pypi.example.internal', '*.registry.example'] },
  credentials: [],
  hostsFile: null,
  hostsPath: '/run/agent/hosts',
  intercept: null,
};
const lines = (c: ProxyConfig) => squidConfig(c).split('\n');

describe('host patterns', () => {
  it.each([
    ['pypi.example', 'pypi.example', true],
    ['pypi.example', 'PyPI.Example', true],
    ['pypi.example', 'pypi.example.', true],
    ['pypi.example', 'x.pypi.example', false],
    ['*.registry.example', 'npm.registry.example', true],
    ['*.registry.example', 'a.b.registry.example', true],
    ['*.registry.example', 'registry.example', false],
    ['*.registry.example', 'evilregistry.example', false],
  ])('%s matches %s: %s', (pattern, host, expected) => {
    expect(hostMatches(pattern, host)).toBe(expected);
  });
});

describe('the squid configuration of a setup phase', () => {
  it('listens on the internal address only, serves only the internal network, and allows the listed hosts, CONNECT and the default methods', () => {
    const text = lines(base);
    expect(text).toContain('http_port 127.20.0.2:3128');
    expect(text.filter((l) => l.startsWith('http_port'))).toHaveLength(1);
    expect(text).toContain('acl agent_clients src 127.20.0.0/16');
    expect(text).toContain('acl agent_allow_0 dstdomain -n pypi.example.internal');
    expect(text).toContain('acl agent_allow_1 dstdom_regex -n -i \\.registry\\.example\\.?$');
    expect(text).toContain('acl agent_methods method GET HEAD OPTIONS');
    expect(text.filter((l) => l.startsWith('http_access'))).toEqual([
      'http_access deny !agent_clients',
      'http_access deny !agent_allow_0 !agent_allow_1',
      'http_access deny agent_loopback',
      'http_access deny agent_linklocal',
      'http_access allow agent_connect',
      'http_access allow agent_methods',
      'http_access deny all',
    ]);
    expect(text).not.toContain('dns_nameservers 127.0.0.1');
  });

  it('denies everything with an empty allow list, and takes the methods given', () => {
    const text = lines({ ...base, egress: { allow: [], methods: ['GET', 'POST'] } });
    expect(text.filter((l) => l.startsWith('http_access'))[1]).toBe('http_access deny all');
    expect(text).toContain('acl agent_methods method GET POST');
  });

  it('resolves from the hosts file alone when one is given', () => {
    const text = lines({ ...base, hostsFile: '/etc/egress-hosts' });
    expect(text).toContain('hosts_file /run/agent/hosts');
    expect(text).toContain('dns_nameservers 127.0.0.1');
  });

  it('replaces a credential\'s header on requests to its host only, its value quoted for squid (% doubled, \\ and " escaped)', () => {
    const text = lines({ ...base, credentials: [{ host: '*.registry.example', header: 'Authorization', value: 'Basic a%b"c\\d' }] });
    expect(text.slice(-4, -1)).toEqual([
      'acl agent_credential_0 dstdom_regex -n -i \\.registry\\.example\\.?$',
      'request_header_access Authorization deny agent_credential_0',
      'request_header_add Authorization "Basic a%%b\\"c\\\\d" agent_credential_0',
    ]);
  });

  it('intercepting, ends TLS at the proxy with the setup authority and trusts the given upstream authorities', () => {
    const text = lines({
      ...base,
      intercept: {
        caCert: '/run/agent/ca.pem',
        caKey: '/run/agent/ca.key',
        certDb: '/run/agent/certs',
        upstreamCa: '/run/agent/upstream-ca.pem',
      },
    });
    expect(text[1]).toBe(
      'http_port 127.20.0.2:3128 ssl-bump tls-cert=/run/agent/ca.pem tls-key=/run/agent/ca.key generate-host-certificates=on dynamic_cert_mem_cache_size=4MB',
    );
    expect(text).toContain('ssl_bump bump all');
    expect(text).toContain('sslcrtd_program /usr/lib/squid/security_file_certgen -s /run/agent/certs -M 4MB');
    expect(text).toContain('tls_outgoing_options cafile=/run/agent/upstream-ca.pem');
    expect(lines(base).some((l) => l.includes('ssl_bump') || l.includes('tls_outgoing'))).toBe(false);
  });

  it('refuses a header value that could end the header early', () => {
    expect(headerValueProblem('Bearer abc')).toBeNull();
    expect(headerValueProblem('Bearer abc\r\nX-Evil: 1')).toMatch(/line break/);
    expect(headerValueProblem('')).toMatch(/empty/);
    expect(headerValueProblem('Bearer é')).toMatch(/non-ASCII/);
  });

  it('gives the sandbox a placeholder of a fixed shape, never the value', () => {
    expect(placeholder('PRIVATE_INDEX_TOKEN')).toBe('coding-agent-placeholder-private-index-token');
  });
});

describe("the proxy's access log as egress events", () => {
  it.each([
    [
      'GET pypi.example.internal 8080 TCP_MISS 200 1811 160',
      { allowed: true, host: 'pypi.example.internal', port: 8080, method: 'GET', bytes: 1971, status: 200 },
    ],
    [
      'CONNECT files.registry.example 443 TCP_TUNNEL 200 5120 700',
      { allowed: true, host: 'files.registry.example', port: 443, method: 'CONNECT', bytes: 5820, status: 200 },
    ],
    [
      'GET blocked.example 80 TCP_DENIED 403 3440 166',
      { allowed: false, host: 'blocked.example', port: 80, method: 'GET', bytes: 3606, status: 403 },
    ],
    [
      'POST pypi.example.internal 8080 TCP_DENIED 403 3400 200',
      { allowed: false, host: 'pypi.example.internal', port: 8080, method: 'POST', bytes: 3600, status: 403 },
    ],
    [
      'GET pypi.example.internal 8080 TCP_MISS 503 4000 150',
      { allowed: true, host: 'pypi.example.internal', port: 8080, method: 'GET', bytes: 4150, status: 503 },
    ],
    [
      '- error:invalid-request - NONE_NONE 400 3900 40',
      { allowed: false, host: 'error:invalid-request', port: null, method: null, bytes: 3940, status: 400 },
    ],
    ['what is this', { allowed: false, host: '(unparsed log line)', port: null, method: null, bytes: 0, status: null }],
  ])('%s', (line, event) => {
    expect(parseAccessLine(line)).toEqual(event);
  });

  it('intercepting, takes a CONNECT as the tunnel, not a request: the requests inside are the events', () => {
    expect(parseAccessLine('CONNECT pypi.example.internal 443 NONE_NONE 200 0 43', true)).toBeNull();
    expect(parseAccessLine('GET blocked.example 443 NONE_NONE 403 3453 158', true)).toEqual({
      allowed: false,
      host: 'blocked.example',
      port: 443,
      method: 'GET',
      bytes: 3611,
      status: 403,
    });
    expect(parseAccessLine('CONNECT pypi.example.internal 443 TCP_TUNNEL 200 5120 700', false)).toMatchObject({
      allowed: true,
      method: 'CONNECT',
    });
  });

  it('takes a connection that sent no request (the probe) as no request at all', () => {
    expect(parseAccessLine('- - - NONE_NONE 0 0 0')).toBeNull();
    expect(parseAccessLine('- - - NONE_NONE - 0 0')).toBeNull();
  });

  it('keeps a host the sandbox made up to printable characters and 253 of them', () => {
    expect(parseAccessLine(`GET ${'x'.repeat(400)}.test 80 TCP_DENIED 403 10 10`)!.host).toHaveLength(253);
  });
});

describe('a fixture with a setup phase', () => {
  it('takes setup and egress in fixture.json', () => {
    const fixture = {
      ...linkcheckFixture(),
      setup: { commands: [['pip', 'install', '-e', '.']], timeout_s: 300 },
      egress: { allow: ['pypi.example.internal'] },
    };
    expect(fixtureSchema.safeParse(fixture).success).toBe(true);
    expect(fixtureSchema.safeParse({ ...fixture, setup: { commands: [['x']], timeout_s: 1, network: true } }).success).toBe(false);
  });
});
