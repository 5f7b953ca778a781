/**
 * The setup cache: the container of a successful setup, committed as an image tagged
 * `coding-agent-setup:<key>`, where the key is the digest of the setup's inputs. A run whose
 * inputs give the same key starts from that image and runs no setup command.
 *
 * The inputs: the base image (content id), the base tree (digest of the workspace manifest before
 * setup), the commands, and the egress policy (allow list, methods, TLS mode, and each named
 * credential as the operator defines it: name, variable name, header, hosts, plain HTTP; never its
 * value). A changed credential value does not change the key: the setup is not run again because a
 * token was rotated.
 */
import type Dockerode from 'dockerode';
import type { EgressSpec, SetupSpec } from '../../core/contracts';
import type { OperatorCredential } from '../../core/egress';
import { engineError, SANDBOX_LABEL } from '../backends/docker';
import { digestJson } from '../../host/digest';

export const SETUP_REPOSITORY = 'coding-agent-setup';
export const SETUP_LABEL = 'setup';
export const KEY_LABEL = 'coding-agent.setup.key';
export const SUMMARY_LABEL = 'coding-agent.setup.summary';
/** The label by which the image scripts find an image built from the same inputs. */
export const INPUTS_LABEL = 'coding-agent.inputs';

export interface SetupInputs {
  base_image: string;
  base_tree: string;
  commands: string[][];
  egress: {
    allow: string[];
    methods: string[] | null;
    tls: string;
    credentials: { name: string; env: string; header: string; hosts: string[]; plain_http: boolean }[];
  };
}

export function setupInputs(
  baseImage: string,
  baseTree: string,
  setup: SetupSpec,
  egress: EgressSpec | null,
  credentials: OperatorCredential[],
): SetupInputs {
  return {
    base_image: baseImage,
    base_tree: baseTree,
    commands: setup.commands,
    egress: {
      allow: egress?.allow ?? [],
      methods: egress?.methods ?? null,
      tls: egress?.tls ?? 'tunnel',
      credentials: credentials.map((c) => ({
        name: c.name,
        env: c.env,
        header: c.header,
        hosts: c.hosts,
        plain_http: c.plain_http === true,
      })),
    },
  };
}

export const setupKey = (inputs: SetupInputs): string => digestJson({ schema_version: 1, ...inputs });
export const setupTag = (key: string) => `${SETUP_REPOSITORY}:${key}`;

/** The labels of a cache image: what it is, its key, and a summary for `cache list` (base64 JSON, so no quoting can break it). */
export function setupLabels(key: string, inputs: SetupInputs): Record<string, string> {
  const summary = {
    base_image: inputs.base_image,
    base_tree: inputs.base_tree,
    commands: inputs.commands.map((c) => c.join(' ').slice(0, 200)).slice(0, 8),
    allow: inputs.egress.allow,
  };
  return {
    [SANDBOX_LABEL]: SETUP_LABEL,
    [KEY_LABEL]: key,
    [SUMMARY_LABEL]: Buffer.from(JSON.stringify(summary)).toString('base64'),
    // A committed container keeps its image's labels: the base image's build inputs would make
    // this cache image look like the base to the image scripts (docker/build-image.sh).
    [INPUTS_LABEL]: `setup:${key}`,
  };
}

/** The cache image of `key`, by content id, or null. */
export async function findSetupImage(docker: Dockerode, key: string): Promise<string | null> {
  try {
    const info = await docker.getImage(setupTag(key)).inspect();
    return info.Config?.Labels?.[KEY_LABEL] === key ? info.Id : null;
  } catch (err) {
    if ((err as { statusCode?: number }).statusCode === 404) return null;
    throw engineError(err);
  }
}

export interface CachedSetup {
  key: string;
  image_id: string;
  tag: string;
  /** Seconds since the epoch, as the engine says. */
  created: number;
  /** Bytes of the setup's own layer (the base image's layers are shared, not counted). */
  layer_bytes: number;
  base_image: string | null;
  base_tree: string | null;
  commands: string[];
  allow: string[];
}

/** Every setup image of the engine, newest first. */
export async function listSetupImages(docker: Dockerode): Promise<CachedSetup[]> {
  let images: Dockerode.ImageInfo[];
  try {
    images = await docker.listImages({ filters: { label: [`${SANDBOX_LABEL}=${SETUP_LABEL}`] } });
  } catch (err) {
    throw engineError(err);
  }
  const rows = await Promise.all(
    images.map(async (i): Promise<CachedSetup> => {
      let summary: Partial<{ base_image: string; base_tree: string; commands: string[]; allow: string[] }> = {};
      try {
        summary = JSON.parse(Buffer.from(i.Labels?.[SUMMARY_LABEL] ?? '', 'base64').toString('utf8'));
      } catch {
        // an image labelled by hand: shown with what it has
      }
      const key = i.Labels?.[KEY_LABEL] ?? '';
      return {
        key,
        image_id: i.Id,
        tag: (i.RepoTags ?? []).find((t) => t.startsWith(`${SETUP_REPOSITORY}:`)) ?? '<none>',
        created: i.Created,
        layer_bytes: await layerBytes(docker, i.Id),
        base_image: summary.base_image ?? null,
        base_tree: summary.base_tree ?? null,
        commands: summary.commands ?? [],
        allow: summary.allow ?? [],
      };
    }),
  );
  return rows.sort((a, b) => b.created - a.created || a.key.localeCompare(b.key));
}

/** The newest layer's size: a setup image is its base plus the one layer its commit made. */
async function layerBytes(docker: Dockerode, id: string): Promise<number> {
  try {
    const history = (await docker.getImage(id).history()) as { Size?: number }[];
    return history[0]?.Size ?? 0;
  } catch (err) {
    if ((err as { statusCode?: number }).statusCode === 404) return 0;
    throw engineError(err);
  }
}

/** Removes every setup image; one a container still uses is kept and named. */
export async function pruneSetupImages(
  docker: Dockerode,
): Promise<{ removed: CachedSetup[]; kept: { image: CachedSetup; why: string }[] }> {
  const removed: CachedSetup[] = [];
  const kept: { image: CachedSetup; why: string }[] = [];
  for (const image of await listSetupImages(docker)) {
    try {
      await docker.getImage(image.image_id).remove({ force: false, noprune: false });
      removed.push(image);
    } catch (err) {
      const code = (err as { statusCode?: number }).statusCode;
      if (code === 404) continue; // gone meanwhile
      if (code === 409) kept.push({ image, why: 'a container uses it' });
      else throw engineError(err);
    }
  }
  return { removed, kept };
}
