/**
 * Where the console may answer, decided before it serves: on a loopback address it answers only
 * to loopback names; anywhere else only behind TLS that the operator vouches for by giving the
 * public `https://` address browsers use (`--public-url`). The console itself speaks plain HTTP.
 *
 * Hazards: without a Host check, a page on another site whose name is rebound to the console's
 * address (DNS rebinding) reads it with the browser's cookies; off loopback, a cookie without
 * `Secure` and a sign-in form over plain HTTP give the session and the token to anyone on the path.
 */

export const isLoopback = (host: string) => host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host);

/** The Host header values a loopback console answers to, ports aside. */
const LOOPBACK_NAMES = ['127.0.0.1', 'localhost', '[::1]'];

/** The operator's public address of the console: an `https:` origin, nothing more. */
export interface PublicOrigin {
  /** `https://name[:port]`, as browsers reach the console through the operator's TLS terminator. */
  url: string;
  /** Host name, lower case. */
  name: string;
  /** The port browsers connect to (443 when the address names none). */
  port: number;
}

/** `--public-url`: an https origin (no path, query, fragment or credentials), or why it is not one. */
export function parsePublicUrl(raw: string): PublicOrigin | string {
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    return `--public-url must be an address like https://console.example.org, got ${JSON.stringify(raw)}`;
  }
  if (u.protocol !== 'https:')
    return `--public-url must be an https:// address (the TLS terminator in front of the console), got ${JSON.stringify(raw)}`;
  if (u.username || u.password || u.pathname !== '/' || u.search || u.hash)
    return `--public-url is an origin only (https://NAME[:PORT]), with no path, query or credentials, got ${JSON.stringify(raw)}`;
  return { url: u.origin, name: u.hostname, port: u.port === '' ? 443 : Number(u.port) };
}

/**
 * Whether a console bound to `host` may serve: on loopback always; elsewhere only with a public
 * https origin. Null when it may, else the one line that says what to do.
 */
export function refusal(host: string, publicOrigin: PublicOrigin | null): string | null {
  if (isLoopback(host) || publicOrigin !== null) return null;
  return (
    `console: ${host} is not a loopback address, and the console serves plain HTTP: put a TLS terminator in front of it ` +
    `and give the address browsers use with --public-url https://NAME[:PORT] (its cookies are then Secure and only that name is answered)`
  );
}

/**
 * True when a request's Host header names this console: the public origin when there is one
 * (the terminator must pass the browser's Host on), else a loopback name on any port.
 */
export function answersTo(hostHeader: string | undefined, publicOrigin: PublicOrigin | null): boolean {
  const header = (hostHeader ?? '').toLowerCase();
  const m = /^(\[[^\]]*\]|[^:]*)(?::(\d+))?$/.exec(header);
  if (m === null) return false;
  const [, name, port] = m;
  if (publicOrigin === null) return LOOPBACK_NAMES.includes(name);
  return name === publicOrigin.name && (port === undefined ? 443 : Number(port)) === publicOrigin.port;
}
