/**
 * Keeping the provider key to the one request header it belongs in.
 *
 * - `scrubSecret` (core/secrets.ts) cleans text that leaves the activity (provider error messages,
 *   which may echo the key or a masked fragment of it).
 * - `singleCredentialFetch` is the SDKs' fetch: each request carries the protocol's headers and
 *   exactly one credential, so nothing the SDKs pick up from the worker's environment
 *   (`*_CUSTOM_HEADERS`, organisation and project ids, a second key) is sent.
 */

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
