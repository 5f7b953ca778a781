import { createHash } from 'node:crypto';
import { canonicalJson } from '../core/canonical';

export function sha256(data: string | Buffer): string {
  return createHash('sha256').update(data).digest('hex');
}

/** Digest of a JSON value's canonical form. */
export function digestJson(value: unknown): string {
  return sha256(canonicalJson(value));
}
