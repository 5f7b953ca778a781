/**
 * The egress proxy's configuration and its audit log: a squid configuration written for one setup
 * phase, and its access log read back as egress events. Pure text in and out; the container that
 * runs squid is proxy.ts's.
 *
 * The policy, top-down, first match wins (squid's own evaluation):
 *   1. a client from outside the run's internal network: denied
 *   2. a host the allow list does not name: denied (matched on the request's host name, so a
 *      refused name is never resolved; `-n`: no reverse lookup of an address either)
 *   3. an allowed name that resolves to a loopback or link-local address: denied
 *   4. CONNECT to an allowed host: allowed (a tunnel: the method inside is not visible)
 *   5. a request whose method is one of `methods`: allowed
 *   6. everything else: denied
 * Credentials: on requests to their host the proxy removes the header the client sent and adds
 * the real one (plain HTTP; inside a CONNECT tunnel the proxy sees no header, unless it
 * intercepts: then it ends TLS with a certificate of the setup's own authority, and rules 5-6
 * and the credentials apply to the requests inside as well).
 */
import { DEFAULT_EGRESS_METHODS, type EgressSpec } from '../../core/contracts';

export const PROXY_PORT = 3128;
/** The fields of each access-log line (squid logformat codes), space-separated. */
const LOGFORMAT = '%>rm %>rd %>rP %Ss %>Hs %<st %>st';

export interface ProxyConfig {
  /** The proxy's address on the run's internal network: the only address it listens on. */
  listen: string;
  /** The internal network's subnet: the only clients served. */
  clients: string;
  egress: EgressSpec | null;
  /** The real value of each credential's header (its variable's value on the worker). */
  credentials: { host: string; header: string; value: string }[];
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

export function squidConfig(c: ProxyConfig): string {
  const allow = c.egress?.allow ?? [];
  const methods = c.egress?.methods ?? DEFAULT_EGRESS_METHODS;
  const t = c.intercept;
  const lines = [
    '# The egress proxy of one setup phase, written by the harness (activities/setup/squid.ts).',
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
    ...(c.hostsFile !== null ? [`hosts_file ${c.hostsPath}`, '# names resolve from the hosts file only', 'dns_nameservers 127.0.0.1'] : []),
    `acl agent_clients src ${c.clients}`,
    ...allow.map((p, i) => hostAcl(`agent_allow_${i}`, p)),
    'acl agent_loopback dst 127.0.0.0/8 0.0.0.0/32 ::1',
    'acl agent_linklocal dst 169.254.0.0/16 fe80::/10',
    'acl agent_connect method CONNECT',
    `acl agent_methods method ${methods.join(' ')}`,
    'http_access deny !agent_clients',
    allow.length > 0 ? `http_access deny ${allow.map((_, i) => `!agent_allow_${i}`).join(' ')}` : 'http_access deny all',
    'http_access deny agent_loopback',
    'http_access deny agent_linklocal',
    'http_access allow agent_connect',
    'http_access allow agent_methods',
    'http_access deny all',
  ];
  for (const [i, cred] of c.credentials.entries()) {
    lines.push(hostAcl(`agent_credential_${i}`, cred.host));
    lines.push(`request_header_access ${cred.header} deny agent_credential_${i}`);
    lines.push(`request_header_add ${cred.header} ${quoted(cred.value)} agent_credential_${i}`);
  }
  return `${lines.join('\n')}\n`;
}

/** One request the proxy saw (SPEC section 11's `{host, port, method?, bytes}`, and the status it answered). */
export interface EgressEvent {
  allowed: boolean;
  host: string;
  port: number | null;
  method: string | null;
  /** Bytes through the proxy for this request: the reply to the sandbox plus the request from it. */
  bytes: number;
  /** The HTTP status the proxy answered the sandbox with (403 for a refusal). */
  status: number | null;
}

const field = (s: string | undefined) => (s === undefined || s === '-' || s === '' ? null : s);
const count = (s: string | undefined) => {
  const n = Number(field(s));
  return Number.isInteger(n) && n >= 0 ? n : 0;
};

/**
 * An access-log line as an event, or null for a connection that made no request. The host is what the sandbox asked for, so it is kept to
 * printable characters and 253 of them. A line that does not have the format's fields (never
 * expected) is still a request: it counts as refused, with the host unknown.
 */
export function parseAccessLine(line: string, intercept = false): EgressEvent | null {
  const f = line.trim().split(' ');
  // Intercepting, a CONNECT only opens the tunnel at the proxy: the requests inside are logged
  // (and judged) one by one, a refused host's as the 403 delivered inside.
  if (intercept && f[0] === 'CONNECT') return null;
  if (f.length !== 7) return { allowed: false, host: '(unparsed log line)', port: null, method: null, bytes: 0, status: null };
  const [method, host, port, status, code, replyBytes, requestBytes] = f;
  // A connection closed before it sent a request (the isolation probe's, to show the proxy is
  // reachable): squid logs it, with no method and no status; it is not a request.
  if (field(method) === null && field(host) === null && !(Number(field(code)) > 0)) return null;
  const squidStatus = field(status) ?? 'NONE';
  const portNumber = Number(field(port));
  const httpStatus = Number(field(code));
  return {
    // Forwarded or tunnelled: TCP_MISS, TCP_TUNNEL, ... (an upstream error is still an allowed request); refused: TCP_DENIED, NONE (an unusable request).
    allowed: squidStatus.startsWith('TCP_') && !squidStatus.startsWith('TCP_DENIED'),
    host: (field(host) ?? '(none)').replace(/[^\x21-\x7e]/g, '?').slice(0, 253),
    port: Number.isInteger(portNumber) && portNumber > 0 && portNumber < 65536 ? portNumber : null,
    method:
      field(method)
        ?.replace(/[^A-Za-z_-]/g, '?')
        .slice(0, 32) ?? null,
    bytes: count(replyBytes) + count(requestBytes),
    status: Number.isInteger(httpStatus) && httpStatus > 0 ? httpStatus : null,
  };
}
