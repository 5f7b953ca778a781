/**
 * The worker operator's credentials file (`AGENT_CREDENTIALS_FILE`, default
 * `<state>/credentials.json`, beside the providers file): the only place that says which
 * variable holds a setup credential, which header carries it and to which hosts it may go
 * (core/egress.ts). Read at each use, so an operator's edit takes effect for the next run. It
 * holds names, never values: the values stay in the worker's environment until a setup starts.
 */
import { existsSync, readFileSync } from 'node:fs';
import { credentialsFileSchema, resolveCredentials, type CredentialLookup, type CredentialsFile } from '../core/egress';
import type { EgressSpec } from '../core/contracts';
import { formatIssues } from '../core/validate';

/** The operator's file cannot be used: no run may proceed on a guess. */
export class CredentialsFileError extends Error {
  override name = 'CredentialsFileError';
}

/** The credentials of the file; a missing file has none. */
export function readCredentialsFile(file: string): CredentialsFile {
  if (!existsSync(file)) return { schema_version: 1, credentials: [] };
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new CredentialsFileError(`the worker's credentials file ${file} is not JSON: ${(err as Error).message}`);
  }
  const parsed = credentialsFileSchema.safeParse(raw);
  if (!parsed.success) throw new CredentialsFileError(`the worker's credentials file ${file} is invalid: ${formatIssues(parsed.error)}`);
  return parsed.data;
}

/** The credentials `egress` names, as the file at `file` defines them (core/egress.ts has the rule). */
export function lookupCredentials(file: string, egress: EgressSpec | null | undefined): CredentialLookup {
  if ((egress?.credentials ?? []).length === 0) return { ok: true, credentials: [] };
  return resolveCredentials(readCredentialsFile(file), egress);
}
