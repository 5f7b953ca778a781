/**
 * The worker operator's model endpoints (SPEC section 9): a providers file on the worker host,
 * `AGENT_PROVIDERS_FILE`, default `<state>/providers.json`. A run names an endpoint and a model;
 * the URL and the variable that holds the key come only from this file. The file is read at each
 * use, so an operator's edit takes effect for the next run without a restart.
 */
import { existsSync, readFileSync } from 'node:fs';
import { canonicalJson } from '../core/canonical';
import { providersFileSchema, type Endpoint, type ProvidersFile } from '../core/contracts';
import { formatIssues } from '../core/validate';
import { writeFileAtomic } from './files';
import { sha256 } from './digest';

/** The operator's file cannot be used: no run may proceed on a guess. */
export class ProvidersFileError extends Error {
  override name = 'ProvidersFileError';
}

/** The endpoints of the file; a missing file has none. */
export function readProvidersFile(file: string): ProvidersFile {
  if (!existsSync(file)) return { schema_version: 1, endpoints: [] };
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new ProvidersFileError(`the worker's providers file is not JSON: ${(err as Error).message}`);
  }
  const parsed = providersFileSchema.safeParse(raw);
  if (!parsed.success) throw new ProvidersFileError(`the worker's providers file is invalid: ${formatIssues(parsed.error)}`);
  return parsed.data;
}

export type EndpointLookup = { ok: true; endpoint: Endpoint } | { ok: false; detail: string };

/** The named endpoint, if the file has it and allows the model. */
export function resolveEndpoint(file: string, name: string, model: string): EndpointLookup {
  const { endpoints } = readProvidersFile(file);
  const endpoint = endpoints.find((e) => e.name === name);
  if (endpoint === undefined) {
    const known = endpoints.map((e) => e.name).join(', ') || 'none';
    return { ok: false, detail: `the worker's providers file has no endpoint ${JSON.stringify(name)} (it has: ${known})` };
  }
  if (endpoint.models !== undefined && !endpoint.models.includes(model)) {
    return {
      ok: false,
      detail: `endpoint ${name} does not serve model ${JSON.stringify(model)} (it serves: ${endpoint.models.join(', ')})`,
    };
  }
  return { ok: true, endpoint };
}

/**
 * The endpoint for a kind, URL and key variable given on the command line (embedded default):
 * an existing one with exactly these settings, else a new one added to the file.
 */
export function ensureEndpoint(file: string, wanted: Omit<Endpoint, 'name' | 'models'>): { name: string; added: boolean } {
  const current = readProvidersFile(file);
  const same = current.endpoints.find(
    (e) => e.kind === wanted.kind && e.base_url === wanted.base_url && e.api_key_env === wanted.api_key_env && e.models === undefined,
  );
  if (same) return { name: same.name, added: false };
  const name = `${wanted.kind}-${sha256(canonicalJson(wanted)).slice(0, 8)}`;
  const endpoint: Endpoint = {
    name,
    kind: wanted.kind,
    ...(wanted.base_url ? { base_url: wanted.base_url } : {}),
    api_key_env: wanted.api_key_env,
  };
  const next: ProvidersFile = { schema_version: 1, endpoints: [...current.endpoints.filter((e) => e.name !== name), endpoint] };
  writeFileAtomic(file, `${JSON.stringify(next, null, 2)}\n`);
  return { name, added: true };
}
