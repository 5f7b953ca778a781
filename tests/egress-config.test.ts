/**
 * The egress proxy's policy as text, its packet filter as iptables-restore input, and its audit
 * log as events (sandbox/setup/squid.ts, ranges.ts); the allow list's host patterns
 * (core/contracts.ts, core/egress.ts) and the operator's credentials: pure, no engine.
 */
import { placeholder } from '../sandbox/setup';
import { filterRules, FIXED_RANGES } from '../sandbox/setup/ranges';
import { headerValueProblem, parseAccessLine, squidConfig, type ProxyConfig } from '../sandbox/setup/squid';
import { egressSchema, fixtureSchema, hostMatches } from '../core/contracts';
import { credentialsFileSchema, patternsOverlap, resolveCredentials, wildcardProblem, type CredentialsFile } from '../core/egress';
import { repoSettingsSchema } from '../core/repo-settings';
import { linkcheckFixture } from './helpers/run-dir';

const forbidden = [...FIXED_RANGES, { reason: 'this_machine' as const, cidrs: ['127.20.0.9/32'] }];
const base: ProxyConfig = {
  listen: '127.20.0.2',
  clients: '127.20.0.0/16',
  egress: { allow: ['pypi.example.internal', '*.registry.example'] },
  credentials: [],
  forbidden,
  open: [],
  connectPorts: [443],
  hostsFile: null,
  hostsPath: '/run/agent/hosts',
  intercept: null,
};
const cidrsOf = (reason: string) => FIXED_RANGES.find((r) => r.reason === reason)!.cidrs.join(' ');
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
  it('listens on the internal address only, serves only the internal network, refuses forbidden addresses before it allows the listed hosts, CONNECT to 443 and the default methods', () => {
    const text = lines(base);
    expect(text).toContain('http_port 127.20.0.2:3128');
    expect(text.filter((l) => l.startsWith('http_port'))).toHaveLength(1);
    expect(text).toContain('acl agent_clients src 127.20.0.0/16');
    expect(text).toContain('acl agent_allow_0 dstdomain -n pypi.example.internal');
    expect(text).toContain('acl agent_allow_1 dstdom_regex -n -i \\.registry\\.example\\.?$');
    expect(text).toContain('acl agent_methods method GET HEAD OPTIONS');
    expect(text).toContain('acl agent_connect_ports port 443');
    expect(text).toContain(`acl agent_dst_private dst ${cidrsOf('private')}`);
    expect(text).toContain(`acl agent_dst_loopback dst ${cidrsOf('loopback')}`);
    expect(text).toContain('acl agent_dst_this_machine dst 127.20.0.9/32');
    expect(text).toContain('acl agent_why_private annotate_transaction agent_reason=private');
    expect(text.filter((l) => l.startsWith('http_access'))).toEqual([
      'http_access deny !agent_clients agent_why_not_client',
      'http_access deny !agent_allow_0 !agent_allow_1 agent_why_host',
      'http_access deny agent_connect !agent_connect_ports agent_why_connect_port',
      'http_access deny agent_dst_loopback agent_why_loopback',
      'http_access deny agent_dst_link_local agent_why_link_local',
      'http_access deny agent_dst_private agent_why_private',
      'http_access deny agent_dst_shared agent_why_shared',
      'http_access deny agent_dst_unspecified agent_why_unspecified',
      'http_access deny agent_dst_unique_local agent_why_unique_local',
      'http_access deny agent_dst_multicast agent_why_multicast',
      'http_access deny agent_dst_this_machine agent_why_this_machine',
      'http_access allow agent_connect',
      'http_access allow agent_methods',
      'http_access deny all agent_why_method',
    ]);
    expect(text).not.toContain('dns_nameservers 127.0.0.1');
    // Every refusal carries its reason to the access log.
    expect(text.find((l) => l.startsWith('logformat agent'))).toMatch(/ %\{agent_reason\}note$/);
  });

  it("lets the operator's opened ranges through every address rule, and CONNECT to the operator's ports", () => {
    const text = lines({ ...base, open: ['127.20.0.9/32', '127.30.0.0/16'], connectPorts: [443, 8443] });
    expect(text).toContain('acl agent_open dst 127.20.0.9/32 127.30.0.0/16');
    expect(text).toContain('acl agent_connect_ports port 443 8443');
    const addressRules = text.filter((l) => l.startsWith('http_access deny agent_dst_'));
    expect(addressRules).toHaveLength(forbidden.length);
    expect(addressRules.every((l) => / !agent_open agent_why_\w+$/.test(l))).toBe(true);
  });

  it('denies everything with an empty allow list, and takes the methods given', () => {
    const text = lines({ ...base, egress: { allow: [], methods: ['GET', 'POST'] } });
    expect(text.filter((l) => l.startsWith('http_access'))[1]).toBe('http_access deny all agent_why_host');
    expect(text).toContain('acl agent_methods method GET POST');
  });

  it('resolves from the hosts file alone when one is given', () => {
    const text = lines({ ...base, hostsFile: '/etc/egress-hosts' });
    expect(text).toContain('hosts_file /run/agent/hosts');
    expect(text).toContain('dns_nameservers 127.0.0.1');
  });

  it('replaces a credential\'s header on requests to its hosts only, inside intercepted TLS unless marked plain HTTP, its value quoted for squid (% doubled, \\ and " escaped)', () => {
    const text = lines({
      ...base,
      credentials: [
        { hosts: ['*.registry.example', 'pypi.example.internal'], header: 'Authorization', value: 'Basic a%b"c\\d', plainHttp: false },
        { hosts: ['pypi.example.internal'], header: 'X-Token', value: 't', plainHttp: true },
      ],
    });
    expect(text).toContain('acl agent_tls proto HTTPS');
    expect(text.slice(-7, -1)).toEqual([
      'acl agent_credential_0 dstdom_regex -n -i \\.registry\\.example\\.?$ ^pypi\\.example\\.internal\\.?$',
      'request_header_access Authorization deny agent_credential_0',
      'request_header_add Authorization "Basic a%%b\\"c\\\\d" agent_credential_0 agent_tls',
      'acl agent_credential_1 dstdom_regex -n -i ^pypi\\.example\\.internal\\.?$',
      'request_header_access X-Token deny agent_credential_1',
      'request_header_add X-Token "t" agent_credential_1',
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

describe('the packet filter of the proxy', () => {
  const rules = filterRules({ clients: '127.20.0.0/16', open: ['127.30.0.0/16'], dns: false, forbidden });
  const outputRules = (text: string) => text.split('\n').filter((l) => l.startsWith('-A OUTPUT'));

  it("accepts the proxy's loopback, its clients and the opened ranges first, then rejects every forbidden range, for each family", () => {
    const v4 = outputRules(rules.v4.text);
    expect(v4.slice(0, 3)).toEqual([
      '-A OUTPUT -o lo -j ACCEPT',
      '-A OUTPUT -d 127.20.0.0/16 -j ACCEPT',
      '-A OUTPUT -d 127.30.0.0/16 -j ACCEPT',
    ]);
    const v4Ranges = forbidden.flatMap((f) => f.cidrs).filter((c) => !c.includes(':'));
    expect(v4.slice(3)).toEqual(v4Ranges.map((c) => `-A OUTPUT -d ${c} -j REJECT --reject-with icmp-admin-prohibited`));
    expect(rules.v4.rules).toBe(v4.length);
    const v6 = outputRules(rules.v6.text);
    expect(v6[0]).toBe('-A OUTPUT -o lo -j ACCEPT');
    expect(v6.slice(1)).toEqual(
      forbidden
        .flatMap((f) => f.cidrs.filter((c) => c.includes(':')))
        .map((c) => `-A OUTPUT -d ${c} -j REJECT --reject-with icmp6-adm-prohibited`),
    );
    expect(rules.v6.rules).toBe(v6.length);
    // A whole table for iptables-restore: the filter table only, so the engine's DNS rules (nat) stay.
    expect(rules.v4.text.startsWith('*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n')).toBe(true);
    expect(rules.v4.text.endsWith('COMMIT\n')).toBe(true);
  });

  it('lets DNS (port 53) out only when the proxy resolves by DNS, before the rejections', () => {
    expect(rules.v4.text).not.toMatch(/--dport 53/);
    const dns = outputRules(filterRules({ clients: '127.20.0.0/16', open: [], dns: true, forbidden }).v4.text);
    expect(dns.slice(2, 4)).toEqual(['-A OUTPUT -p udp --dport 53 -j ACCEPT', '-A OUTPUT -p tcp --dport 53 -j ACCEPT']);
  });
});

describe("the proxy's access log as egress events", () => {
  it.each([
    [
      'GET pypi.example.internal 8080 TCP_MISS 200 1811 160 -',
      { allowed: true, host: 'pypi.example.internal', port: 8080, method: 'GET', bytes: 1971, status: 200 },
    ],
    [
      'CONNECT files.registry.example 443 TCP_TUNNEL 200 5120 700 -',
      { allowed: true, host: 'files.registry.example', port: 443, method: 'CONNECT', bytes: 5820, status: 200 },
    ],
    [
      'GET blocked.example 80 TCP_DENIED 403 3440 166 host',
      { allowed: false, host: 'blocked.example', port: 80, method: 'GET', bytes: 3606, status: 403, reason: 'host not in the allow list' },
    ],
    [
      'POST pypi.example.internal 8080 TCP_DENIED 403 3400 200 method',
      { allowed: false, host: 'pypi.example.internal', port: 8080, method: 'POST', bytes: 3600, status: 403, reason: 'method not allowed' },
    ],
    [
      'GET pypi.example.internal 8080 TCP_DENIED 403 3400 160 private',
      { allowed: false, host: 'pypi.example.internal', port: 8080, method: 'GET', bytes: 3560, status: 403, reason: 'private address' },
    ],
    [
      'CONNECT pypi.example.internal 8443 TCP_DENIED 403 3400 160 connect_port',
      {
        allowed: false,
        host: 'pypi.example.internal',
        port: 8443,
        method: 'CONNECT',
        bytes: 3560,
        status: 403,
        reason: 'CONNECT to a port not allowed',
      },
    ],
    [
      'GET pypi.example.internal 8080 TCP_MISS 503 4000 150 -',
      { allowed: true, host: 'pypi.example.internal', port: 8080, method: 'GET', bytes: 4150, status: 503 },
    ],
    [
      '- error:invalid-request - NONE_NONE 400 3900 40 -',
      { allowed: false, host: 'error:invalid-request', port: null, method: null, bytes: 3940, status: 400, reason: 'not a usable request' },
    ],
    [
      'what is this',
      { allowed: false, host: '(unparsed log line)', port: null, method: null, bytes: 0, status: null, reason: 'unparsed log line' },
    ],
  ])('%s', (line, event) => {
    expect(parseAccessLine(line)).toEqual(event);
  });

  it('intercepting, takes an allowed CONNECT as the tunnel and a refused one as the request, not the 403 squid hands inside it', () => {
    expect(parseAccessLine('CONNECT pypi.example.internal 443 NONE_NONE 200 0 43 -', true)).toBeNull();
    expect(parseAccessLine('CONNECT blocked.example 443 TCP_DENIED 200 0 39 host', true)).toEqual({
      allowed: false,
      host: 'blocked.example',
      port: 443,
      method: 'CONNECT',
      bytes: 39,
      status: 200,
      reason: 'host not in the allow list',
    });
    expect(parseAccessLine('GET blocked.example 443 NONE_NONE 403 3453 158 -', true)).toBeNull();
    expect(parseAccessLine('POST pypi.example.internal 443 TCP_DENIED 403 3453 158 method', true)).toMatchObject({
      allowed: false,
      method: 'POST',
      reason: 'method not allowed',
    });
    expect(parseAccessLine('CONNECT pypi.example.internal 443 TCP_TUNNEL 200 5120 700 -', false)).toMatchObject({
      allowed: true,
      method: 'CONNECT',
    });
  });

  it('takes a connection that sent no request (the probe) as no request at all', () => {
    expect(parseAccessLine('- - - NONE_NONE 0 0 0 -')).toBeNull();
    expect(parseAccessLine('- - - NONE_NONE - 0 0 -')).toBeNull();
  });

  it('keeps a host the sandbox made up to printable characters and 253 of them', () => {
    expect(parseAccessLine(`GET ${'x'.repeat(400)}.test 80 TCP_DENIED 403 10 10 host`)!.host).toHaveLength(253);
  });
});

describe('allow entries are names within one registrable domain', () => {
  const allow = (entry: string) => repoSettingsSchema.safeParse({ schema_version: 1, egress: { allow: [entry] } });
  const problem = (entry: string) => {
    const parsed = allow(entry);
    return parsed.success ? null : parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ');
  };

  it.each(['pypi.example.internal', '*.registry.example', 'files.pythonhosted.org', '*.pkg.example.co.uk', 'npm-1.example'])(
    'takes %s',
    (entry) => expect(problem(entry)).toBeNull(),
  );

  it.each([
    ['an IPv4 literal', '127.0.0.1', 'its last label must start with a letter'],
    ['a number a resolver takes for an address', '2130706433', 'its last label must start with a letter'],
    ['a hex address', '0x7f.1', 'its last label must start with a letter'],
    ['an IPv6 literal', '::1', 'a host name'],
    ['a bracketed IPv6 literal', '[::1]', 'a host name'],
    ['everything', '*', 'a host name'],
    ['a top-level domain', '*.com', 'broader than one registrable domain'],
    ['a public suffix of two labels', '*.co.uk', 'co.uk is a public suffix'],
    ['a private public suffix', '*.github.io', 'github.io is a public suffix'],
  ])('refuses %s (%s), naming the entry', (_what, entry, message) => {
    expect(problem(entry)).toContain(`egress.allow.0: "${entry}": `);
    expect(problem(entry)).toContain(message);
  });

  it('leaves the public suffix list to core/egress.ts: the contract refuses only a wildcard over one label', () => {
    expect(egressSchema.safeParse({ allow: ['*.co.uk'] }).success).toBe(true);
    expect(wildcardProblem('*.co.uk')).toMatch(/broader than one registrable domain/);
    expect(wildcardProblem('*.registry.example')).toBeNull();
    expect(egressSchema.safeParse({ allow: ['*.com'] }).success).toBe(false);
  });
});

describe("credentials are the operator's, named by a run", () => {
  const file: CredentialsFile = {
    schema_version: 1,
    credentials: [
      { name: 'private-index', env: 'PRIVATE_INDEX_TOKEN', header: 'Authorization', hosts: ['pypi.example.internal'] },
      { name: 'mirror', env: 'MIRROR_TOKEN', header: 'X-Token', hosts: ['*.mirror.example'], plain_http: true },
    ],
  };

  it('refuses the old shape, a credential a repository defines itself, naming the field', () => {
    const parsed = repoSettingsSchema.safeParse({
      schema_version: 1,
      egress: { allow: ['pypi.example.internal'], credentials: [{ host: 'pypi.example.internal', header: 'X-Probe', env: 'SOME_VAR' }] },
    });
    expect(parsed.success).toBe(false);
    expect(parsed.error!.issues.map((i) => `${i.path.join('.')}: ${i.message}`)).toEqual([
      "egress.credentials.0: the name of a credential of the worker's credentials file (a repository names a credential; its variable, header and hosts are the operator's)",
    ]);
  });

  it('gives the definitions of names the file has, the run can send and its allow list lets through', () => {
    expect(resolveCredentials(file, { allow: ['pypi.example.internal'], tls: 'intercept', credentials: ['private-index'] })).toEqual({
      ok: true,
      credentials: [file.credentials[0]],
    });
    expect(resolveCredentials(file, { allow: ['a.mirror.example'], credentials: ['mirror'] })).toEqual({
      ok: true,
      credentials: [file.credentials[1]],
    });
    expect(resolveCredentials(file, { allow: [] })).toEqual({ ok: true, credentials: [] });
  });

  it.each([
    [
      'an unknown name',
      { allow: ['pypi.example.internal'], tls: 'intercept' as const, credentials: ['other'] },
      `egress.credentials: the worker's credentials file has no credential "other" (it has: private-index, mirror)`,
    ],
    [
      'a credential that could only go through a tunnel',
      { allow: ['pypi.example.internal'], credentials: ['private-index'] },
      'egress.credentials: credential "private-index" is sent only inside TLS the proxy intercepts: give egress "tls": "intercept"',
    ],
    [
      'a credential none of whose hosts the allow list lets through',
      { allow: ['elsewhere.example'], tls: 'intercept' as const, credentials: ['private-index'] },
      'egress.credentials: credential "private-index" goes only to pypi.example.internal, and egress.allow lets none of them through',
    ],
  ])('refuses %s in one line naming it', (_what, egress, detail) => {
    const found = resolveCredentials(file, egress);
    expect(found.ok).toBe(false);
    expect((found as { detail: string }).detail.startsWith(detail)).toBe(true);
  });

  it.each([
    ['pypi.example', 'pypi.example', true],
    ['pypi.example', 'PyPI.example', true],
    ['pypi.example', 'other.example', false],
    ['*.mirror.example', 'a.mirror.example', true],
    ['*.mirror.example', 'mirror.example', false],
    ['*.mirror.example', '*.mirror.example', true],
    ['*.mirror.example', '*.eu.mirror.example', true],
    ['*.eu.mirror.example', '*.mirror.example', true],
    ['*.mirror.example', '*.other.example', false],
  ])('%s and %s share a name: %s', (a, b, expected) => {
    expect(patternsOverlap(a, b)).toBe(expected);
    expect(patternsOverlap(b, a)).toBe(expected);
  });

  it("refuses an operator's file with a name twice, a reserved header or a host that is an address", () => {
    const one = file.credentials[0];
    const issues = (credentials: unknown[]) => {
      const parsed = credentialsFileSchema.safeParse({ schema_version: 1, credentials });
      return parsed.success ? [] : parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
    };
    expect(issues([one, one])).toEqual(['credentials.1.name: private-index is named twice']);
    expect(issues([{ ...one, header: 'Proxy-Authorization' }])).toEqual([
      'credentials.0.header: a header the proxy owns or that frames the message',
    ]);
    expect(issues([{ ...one, hosts: ['127.0.0.1'] }])[0]).toMatch(/^credentials\.0\.hosts\.0: "127\.0\.0\.1": a host name, not an address/);
    expect(issues([{ ...one, value: 'x' }])[0]).toMatch(/Unrecognized key/);
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
