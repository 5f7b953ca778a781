/**
 * Keeping a secret out of text that leaves the host's hands (provider error messages, a setup's
 * output, the proxy's log): the secret, every 8-character or longer piece of it, and key-shaped
 * tokens are replaced. Pure: the sandbox and the models both scrub with it.
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
