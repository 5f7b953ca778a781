/**
 * The egress rules a workflow never needs (so the public suffix list stays out of the workflow
 * bundle, which imports core/contracts.ts): how far an allow entry reaches, the worker
 * operator's credentials file, and which of its credentials a run's `egress` may use.
 *
 * Trust. `egress` comes from a repository's `.coding-agent.json` or a fixture: untrusted. It
 * names hosts and credentials and can only narrow what the operator gives. The credentials file
 * is the operator's: it alone says which variable holds a credential, which header carries it,
 * to which hosts it may go, and whether it may go over plain HTTP.
 *
 * The rule for a named credential (refused before any container starts, one line naming it):
 *   1. the credentials file has that name;
 *   2. the run can send it: the proxy intercepts TLS (`egress.tls: "intercept"`), or the operator
 *      marked it `plain_http` (a credential's header is set inside TLS the proxy ends, or on plain
 *      HTTP when so marked; inside a tunnel the proxy sees no header, so it never could);
 *   3. some host the operator listed for it is also let through by `egress.allow` (the two
 *      patterns have a name in common), so some request could carry it.
 * The proxy then sets the header on requests to the operator's hosts only (and only allowed
 * requests leave the proxy at all).
 */
import { getDomain } from 'tldts';
import { z } from 'zod';
import { CREDENTIAL_NAME, ENV_NAME, hostPattern, hostMatches, type EgressSpec } from './contracts';

/**
 * Why a wildcard allow entry reaches more than one registrable domain, or null. `*.s` is refused
 * when `s` is a public suffix (ICANN's or a private one such as `github.io`) or shorter: it would
 * let a setup reach anyone's host below it. Exact names and the shape of entries are
 * core/contracts.ts's (`hostPatternProblem`).
 */
export function wildcardProblem(pattern: string): string | null {
  if (!pattern.startsWith('*.')) return null;
  const suffix = pattern.slice(2).toLowerCase();
  return getDomain(suffix, { allowPrivateDomains: true }) === null
    ? `"${pattern}": broader than one registrable domain (${suffix} is a public suffix: name the domain below it)`
    : null;
}

/** `egress` as an untrusted file gives it: the contract's checks, and each wildcard within one registrable domain. */
export function egressProblems(egress: EgressSpec | null | undefined): { path: (string | number)[]; message: string }[] {
  return (egress?.allow ?? []).flatMap((p, i) => {
    const problem = wildcardProblem(p);
    return problem === null ? [] : [{ path: ['allow', i], message: problem }];
  });
}

/** Headers the proxy owns or that frame the message: a credential may not name them. */
const RESERVED_HEADERS = new Set([
  'host',
  'connection',
  'content-length',
  'transfer-encoding',
  'proxy-connection',
  'proxy-authorization',
  'te',
  'upgrade',
  'via',
  'x-forwarded-for',
]);

/** One credential of the operator's file. */
export const operatorCredentialSchema = z.strictObject({
  name: z.string().regex(CREDENTIAL_NAME, 'a credential name: lowercase letters, digits, . _ - (at most 64)'),
  /** The worker's variable that holds the value (read when a setup starts, never stored). */
  env: z.string().regex(ENV_NAME, 'the name of an environment variable'),
  header: z
    .string()
    .regex(/^[A-Za-z0-9-]{1,64}$/, 'an HTTP header name')
    .refine((h) => !RESERVED_HEADERS.has(h.toLowerCase()), 'a header the proxy owns or that frames the message'),
  /** The hosts (names, or `*.` and a name) whose requests may carry it. */
  hosts: z.array(hostPattern).min(1).max(16),
  /** Also on plain HTTP requests to those hosts (default: inside TLS the proxy intercepts only). */
  plain_http: z.boolean().optional(),
});
export type OperatorCredential = z.infer<typeof operatorCredentialSchema>;

/** The operator's credentials file (`AGENT_CREDENTIALS_FILE`, default `<state>/credentials.json`). */
export const credentialsFileSchema = z.strictObject({
  schema_version: z.literal(1),
  credentials: z
    .array(operatorCredentialSchema)
    .max(64)
    .superRefine((list, ctx) => {
      const seen = new Set<string>();
      for (const [i, c] of list.entries()) {
        if (seen.has(c.name)) ctx.addIssue({ code: 'custom', path: [i, 'name'], message: `${c.name} is named twice` });
        seen.add(c.name);
      }
    }),
});
export type CredentialsFile = z.infer<typeof credentialsFileSchema>;

/** True when some host name matches both patterns. */
export function patternsOverlap(a: string, b: string): boolean {
  const wa = a.startsWith('*.');
  const wb = b.startsWith('*.');
  if (!wa && !wb) return a.toLowerCase() === b.toLowerCase();
  if (wa && !wb) return hostMatches(a, b);
  if (!wa && wb) return hostMatches(b, a);
  // Two wildcards share names when one suffix is the other or lies below it.
  return a.toLowerCase() === b.toLowerCase() || hostMatches(a, b.slice(2)) || hostMatches(b, a.slice(2));
}

export type CredentialLookup = { ok: true; credentials: OperatorCredential[] } | { ok: false; detail: string };

/** The operator's definitions of the credentials `egress` names, or the one line that refuses the first it may not use. */
export function resolveCredentials(file: CredentialsFile, egress: EgressSpec | null | undefined): CredentialLookup {
  const credentials: OperatorCredential[] = [];
  for (const name of egress?.credentials ?? []) {
    const c = file.credentials.find((x) => x.name === name);
    if (c === undefined) {
      const known = file.credentials.map((x) => x.name).join(', ') || 'none';
      return { ok: false, detail: `egress.credentials: the worker's credentials file has no credential "${name}" (it has: ${known})` };
    }
    if (egress?.tls !== 'intercept' && c.plain_http !== true)
      return {
        ok: false,
        detail: `egress.credentials: credential "${name}" is sent only inside TLS the proxy intercepts: give egress "tls": "intercept" (through a tunnel the proxy never sees a header; its operator did not allow it over plain HTTP)`,
      };
    if (!c.hosts.some((h) => (egress?.allow ?? []).some((a) => patternsOverlap(h, a))))
      return {
        ok: false,
        detail: `egress.credentials: credential "${name}" goes only to ${c.hosts.join(', ')}, and egress.allow lets none of them through`,
      };
    credentials.push(c);
  }
  return { ok: true, credentials };
}
