/**
 * The egress proxy's configuration and its audit log: a squid configuration written for one setup
 * phase, and its access log read back as egress events. Pure text in and out; the container that
 * runs squid, and its packet filter, are proxy.ts's.
 *
 * The policy, top-down, first match wins (squid's own evaluation); each refusal annotates the
 * transaction with its reason (`agent_reason`), which the access log carries to the event:
 *   1. a client from outside the run's internal network: denied
 *   2. a host the allow list does not name: denied (matched on the request's host name, so a
 *      refused name is never resolved; `-n`: no reverse lookup of an address either)
 *   3. CONNECT to a port other than 443 and the operator's ports: denied
 *   4. an allowed name that resolves (squid's own resolution, the one it connects with) to a
 *      forbidden address: loopback, link-local, private, shared, unspecified, unique-local,
 *      multicast, this machine's addresses, the engine's networks; unless the operator opened a
 *      range that holds it (AGENT_EGRESS_OPEN_CIDRS): denied, the range's kind the reason
 *   5. CONNECT to an allowed host: allowed (a tunnel: the method inside is not visible)
 *   6. a request whose method is one of `methods`: allowed
 *   7. everything else: denied
 * The packet filter in the proxy's network namespace (proxy.ts, ranges.ts) refuses the same
 * addresses again, below squid.
 *
 * Credentials (the operator's, by name): on requests to a credential's hosts the proxy removes
 * the header the client sent and adds the real one, inside TLS it intercepts only (`proto HTTPS`:
 * a request it decrypted), and on plain HTTP too only when the operator marked the credential
 * `plain_http`. Inside a CONNECT tunnel the proxy sees no header at all.
 */
import { DEFAULT_EGRESS_METHODS, type EgressSpec } from '../../core/contracts';
import type { EgressEvent } from '../../core/activities';

export const PROXY_PORT = 3128;
/** The fields of each access-log line (squid logformat codes), space-separated: the last is the refusal's reason code. */
const LOGFORMAT = '%>rm %>rd %>rP %Ss %>Hs %<st %>st %{agent_reason}note';

/** Why the proxy refused a request: the code squid logs, and the reason the `egress_denied` event gives. */
export const DENY_REASONS = {
  not_client: 'not a client of this setup',
  host: 'host not in the allow list',
  connect_port: 'CONNECT to a port not allowed',
  loopback: 'loopback address',
  link_local: 'link-local address',
  private: 'private address',
  shared: 'shared address',
  unspecified: 'unspecified address',
  unique_local: 'unique-local address',
  multicast: 'multicast address',
  this_machine: "this machine's address",
  engine_network: "the container engine's network",
  method: 'method not allowed',
} as const;
export type DenyReason = keyof typeof DENY_REASONS;
/** Address ranges a setup may not reach, in the order they are judged (the first that holds an address names the reason). */
export type ForbiddenRanges = { reason: DenyReason; cidrs: string[] }[];

export interface ProxyCredential {
  /** The operator's hosts for it (names, or `*.` and a name). */
  hosts: string[];
  header: string;
  /** The real value (its variable's value on the worker). */
  value: string;
  /** Also on plain HTTP (the operator's `plain_http`); otherwise inside intercepted TLS only. */
  plainHttp: boolean;
}

export interface ProxyConfig {
  /** The proxy's address on the run's internal network: the only address it listens on. */
  listen: string;
  /** The internal network's subnet: the only clients served. */
  clients: string;
  egress: EgressSpec | null;
  credentials: ProxyCredential[];
  /** What no allowed name may resolve to (ranges.ts), and the operator's opened ranges, which win over it. */
  forbidden: ForbiddenRanges;
  open: string[];
  /** Ports CONNECT may go to (443 and the operator's). */
  connectPorts: number[];
  /** Names resolve from this hosts file only (tests: names of this machine); null: DNS. */
  hostsFile: string | null;
  /** Where the container holds the hosts file. */
  hostsPath: string;
  /**
   * TLS interception (`egress.tls: intercept`): the setup's certificate authority (made in the
   * proxy's tmpfs, its key never leaving it) and where the proxy keeps its files; null: tunnels.
   */
  intercept: { caCert: string; caKey: string; certDb: string; upstreamCa: string | null } | null;
}

/** A header value as squid's configuration can carry it, or why it cannot. */
export function headerValueProblem(value: string): string | null {
  if (value.length === 0) return 'it is empty';
  if (value.length > 8192) return 'it is longer than 8192 characters';
  // Visible ASCII, space and tab only: no line break could end the header early.
  if (!/^[\x20-\x7e\t]+$/.test(value)) return 'it holds a line break, a control character or a non-ASCII character';
  return null;
}

/** A quoted value of `request_header_add`: a logformat string, so `%` is doubled; `\` and `"` escaped. */
function quoted(value: string): string {
  return `"${value.replace(/%/g, '%%').replace(/[\\"]/g, (c) => `\\${c}`)}"`;
}

function regexEscape(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, (c) => `\\${c}`);
}

/** The ACL lines that match a host pattern: an exact name, or `*.suffix`'s names below suffix. */
function hostAcl(name: string, pattern: string): string {
  if (pattern.startsWith('*.')) return `acl ${name} dstdom_regex -n -i \\.${regexEscape(pattern.slice(2))}\\.?$`;
  return `acl ${name} dstdomain -n ${pattern}`;
}

/** One ACL matching any of several host patterns (one type, so squid ORs its values). */
function hostsAcl(name: string, patterns: string[]): string {
  const regex = (p: string) => (p.startsWith('*.') ? `\\.${regexEscape(p.slice(2))}\\.?$` : `^${regexEscape(p)}\\.?$`);
  return `acl ${name} dstdom_regex -n -i ${patterns.map(regex).join(' ')}`;
}

/** The ACL that annotates a refusal with its reason (always matches; placed last in a rule, so only a refusing rule reaches it). */
const why = (reason: DenyReason) => `agent_why_${reason}`;

export function squidConfig(c: ProxyConfig): string {
  const allow = c.egress?.allow ?? [];
  const methods = c.egress?.methods ?? DEFAULT_EGRESS_METHODS;
  const t = c.intercept;
  const reasons = Object.keys(DENY_REASONS) as DenyReason[];
  const forbidden = c.forbidden.filter((f) => f.cidrs.length > 0);
  const unlessOpen = c.open.length > 0 ? ' !agent_open' : '';
  const lines = [
    '# The egress proxy of one setup phase, written by the harness (sandbox/setup/squid.ts).',
    t === null
      ? `http_port ${c.listen}:${PROXY_PORT}`
      : `http_port ${c.listen}:${PROXY_PORT} ssl-bump tls-cert=${t.caCert} tls-key=${t.caKey} generate-host-certificates=on dynamic_cert_mem_cache_size=4MB`,
    ...(t === null
      ? []
      : [
          `sslcrtd_program /usr/lib/squid/security_file_certgen -s ${t.certDb} -M 4MB`,
          'sslcrtd_children 2 startup=1 idle=1',
          // Every tunnel is opened at the proxy, so each request inside is seen, judged and logged.
          'ssl_bump bump all',
          ...(t.upstreamCa !== null ? [`tls_outgoing_options cafile=${t.upstreamCa}`] : []),
        ]),
    'pid_filename none',
    'cache deny all',
    'cache_mem 8 MB',
    'cache_log stdio:/dev/stderr',
    `logformat agent ${LOGFORMAT}`,
    'access_log stdio:/dev/stdout agent',
    'buffered_logs off',
    'pinger_enable off',
    'shutdown_lifetime 0 seconds',
    'forwarded_for delete',
    'via off',
    'httpd_suppress_version_string on',
    'dns_timeout 5 seconds',
    // The packet filter refuses a forbidden address at once; anything else unreachable fails in this time.
    'connect_timeout 20 seconds',
    ...(c.hostsFile !== null ? [`hosts_file ${c.hostsPath}`, '# names resolve from the hosts file only', 'dns_nameservers 127.0.0.1'] : []),
    `acl agent_clients src ${c.clients}`,
    ...allow.map((p, i) => hostAcl(`agent_allow_${i}`, p)),
    ...forbidden.map((f) => `acl agent_dst_${f.reason} dst ${f.cidrs.join(' ')}`),
    ...(c.open.length > 0 ? [`acl agent_open dst ${c.open.join(' ')}`] : []),
    `acl agent_connect_ports port ${c.connectPorts.join(' ')}`,
    'acl agent_connect method CONNECT',
    `acl agent_methods method ${methods.join(' ')}`,
    'acl agent_tls proto HTTPS',
    ...reasons.map((r) => `acl ${why(r)} annotate_transaction agent_reason=${r}`),
    `http_access deny !agent_clients ${why('not_client')}`,
    `http_access deny ${allow.length > 0 ? allow.map((_, i) => `!agent_allow_${i}`).join(' ') : 'all'} ${why('host')}`,
    `http_access deny agent_connect !agent_connect_ports ${why('connect_port')}`,
    ...forbidden.map((f) => `http_access deny agent_dst_${f.reason}${unlessOpen} ${why(f.reason)}`),
    'http_access allow agent_connect',
    'http_access allow agent_methods',
    `http_access deny all ${why('method')}`,
  ];
  for (const [i, cred] of c.credentials.entries()) {
    lines.push(hostsAcl(`agent_credential_${i}`, cred.hosts));
    lines.push(`request_header_access ${cred.header} deny agent_credential_${i}`);
    lines.push(`request_header_add ${cred.header} ${quoted(cred.value)} agent_credential_${i}${cred.plainHttp ? '' : ' agent_tls'}`);
  }
  return `${lines.join('\n')}\n`;
}

const field = (s: string | undefined) => (s === undefined || s === '-' || s === '' ? null : s);
const count = (s: string | undefined) => {
  const n = Number(field(s));
  return Number.isInteger(n) && n >= 0 ? n : 0;
};

/**
 * An access-log line as an event, or null for a connection that made no request. The host is what
 * the sandbox asked for, so it is kept to printable characters and 253 of them. A line that does
 * not have the format's fields (never expected) is still a request: it counts as refused, with
 * the host unknown.
 */
export function parseAccessLine(line: string, intercept = false): EgressEvent | null {
  const f = line.trim().split(' ');
  if (f.length !== 8)
    return { allowed: false, host: '(unparsed log line)', port: null, method: null, bytes: 0, status: null, reason: 'unparsed log line' };
  const [method, host, port, status, code, replyBytes, requestBytes, note] = f;
  // A connection closed before it sent a request (the isolation probe's, to show the proxy is
  // reachable): squid logs it, with no method and no status; it is not a request.
  if (field(method) === null && field(host) === null && !(Number(field(code)) > 0)) return null;
  const squidStatus = field(status) ?? 'NONE';
  const denied = squidStatus.startsWith('TCP_DENIED');
  const reasonCode = field(note)?.split(',')[0] ?? null;
  if (intercept) {
    // An allowed CONNECT only opens the tunnel at the proxy: the requests inside are the events,
    // each judged and logged. A refused CONNECT is the event itself (with its reason); squid then
    // opens that tunnel only to hand the sandbox a 403 inside TLS, logged once more without a
    // reason: that line is squid's answer, not another request.
    if (method === 'CONNECT' && !denied) return null;
    if (squidStatus.startsWith('NONE') && reasonCode === null && field(code) === '403') return null;
  }
  const portNumber = Number(field(port));
  const httpStatus = Number(field(code));
  // Forwarded or tunnelled: TCP_MISS, TCP_TUNNEL, ... (an upstream error is still an allowed request); refused: TCP_DENIED, NONE (an unusable request).
  const allowed = squidStatus.startsWith('TCP_') && !denied;
  const reason =
    reasonCode !== null && reasonCode in DENY_REASONS
      ? DENY_REASONS[reasonCode as DenyReason]
      : squidStatus.startsWith('NONE')
        ? 'not a usable request'
        : 'refused by the proxy';
  return {
    allowed,
    host: (field(host) ?? '(none)').replace(/[^\x21-\x7e]/g, '?').slice(0, 253),
    port: Number.isInteger(portNumber) && portNumber > 0 && portNumber < 65536 ? portNumber : null,
    method:
      field(method)
        ?.replace(/[^A-Za-z_-]/g, '?')
        .slice(0, 32) ?? null,
    bytes: count(replyBytes) + count(requestBytes),
    status: Number.isInteger(httpStatus) && httpStatus > 0 ? httpStatus : null,
    ...(allowed ? {} : { reason }),
  };
}
