/**
 * Keeping the provider key to the one request header it belongs in.
 *
 * - `scrubSecret` cleans text that leaves the activity (provider error messages, which may echo
 *   the key or a masked fragment of it): the key, every 8-character or longer piece of it, and
 *   key-shaped tokens are replaced.
 * - `singleCredentialFetch` is the SDKs' fetch: each request carries the protocol's headers and
 *   exactly one credential, so nothing the SDKs pick up from the worker's environment
 *   (`*_CUSTOM_HEADERS`, organisation and project ids, a second key) is sent.
 */

export const REDACTED = '[redacted]';
const FRAGMENT = 8;
/** Key-shaped tokens: `sk-...` keys (masked ones included) and bearer credentials. */
const KEY_SHAPED = [/\bsk-[A-Za-z0-9_*.\-]{2,}/g, /\bBearer\s+[^\s"',;]+/gi];

export function scrubSecret(text: string, secret: string | null | undefined): string {
  let out = text;
  if (secret && secret.length >= FRAGMENT) {
    const pieces = new Set<string>();
    for (let i = 0; i + FRAGMENT <= secret.length; i++) pieces.add(secret.slice(i, i + FRAGMENT));
    const hidden = new Uint8Array(out.length);
    for (let i = 0; i + FRAGMENT <= out.length; i++) if (pieces.has(out.slice(i, i + FRAGMENT))) hidden.fill(1, i, i + FRAGMENT);
    let cleaned = '';
    for (let i = 0; i < out.length;) {
      if (!hidden[i]) {
        cleaned += out[i++];
        continue;
      }
      while (i < out.length && hidden[i]) i++;
      cleaned += REDACTED;
    }
    out = cleaned;
  } else if (secret) {
    out = out.split(secret).join(REDACTED);
  }
  for (const pattern of KEY_SHAPED) out = out.replace(pattern, REDACTED);
  return out;
}

/** An error whose message and stack went through `scrubSecret` (the stack repeats the message). */
export function scrubbedError(err: unknown, secret: string): Error {
  const e = err instanceof Error ? err : new Error(String(err));
  const clean = new Error(scrubSecret(e.message, secret));
  clean.name = e.name;
  clean.stack = scrubSecret(e.stack ?? '', secret);
  return clean;
}

/** Headers of the two protocols that carry no credential and no operator-specific value. */
const PROTOCOL_HEADER =
  /^(accept|accept-encoding|content-type|content-length|user-agent|anthropic-version|anthropic-beta|idempotency-key|x-stainless-[a-z0-9-]+)$/;

export function singleCredentialFetch(apiKey: string): typeof fetch {
  return (input, init) => {
    const headers = new Headers();
    new Headers(init?.headers).forEach((value, name) => {
      if (PROTOCOL_HEADER.test(name)) headers.set(name, value);
    });
    headers.set('authorization', `Bearer ${apiKey}`);
    return fetch(input, { ...init, headers });
  };
}
