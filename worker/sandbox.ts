/**
 * The worker's container sandbox: one DockerBackend and its isolation evidence.
 *
 * The evidence is measured by `probeIsolation` with exactly the settings every exec of this
 * worker uses (the override, if any, applies to both), judged against the backend's declared
 * defaults, so a weakened worker is refused rather than trusted.
 *
 * Caching: a measurement (a probe that ran and produced checks, verified or not) is kept for the
 * life of the process and shared by every worker of the process with the same engine, image and
 * settings. A result that measured nothing (`runtime_unavailable`, `image_missing`, a probe
 * error) is not kept: the next run probes again, so an engine started or an image built after
 * the worker is picked up. Concurrent callers share one in-flight probe.
 */
import { realpathSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import Dockerode from 'dockerode';
import { DockerBackend, type ContainerSettings, type DockerLimits, type SettingsOverride } from '../sandbox/backends/docker';
import { probeIsolation } from '../sandbox/probe/isolation';
import type { IsolationEvidence } from '../core/contracts';
import { DEFAULT_SANDBOX_IMAGE, type Settings } from '../host/settings';

export { DEFAULT_SANDBOX_IMAGE };

export interface SandboxOptions {
  /** Image tag or content id; default the settings' `sandboxImage`. */
  image?: string;
  /** Weakens (or changes) the settings of every exec and of the probe; for tests. */
  override?: SettingsOverride;
  /** How to reach the engine; default dockerode's own reading of `DOCKER_HOST` (else the local socket). */
  engine?: Dockerode.DockerOptions;
  limits?: Partial<DockerLimits>;
}

export interface Sandbox {
  backend: DockerBackend;
  /** The evidence for this worker's settings; never rejects. */
  isolation: () => Promise<IsolationEvidence>;
  /** Removes orphaned containers, then measures; called once when the worker starts. */
  warmUp: () => void;
  /**
   * The same sandbox with another image of the engine (a run's `--image`, a repository's
   * settings): its own backend and its own evidence, measured on that image.
   */
  forImage: (image: string) => Sandbox;
}

const measured = new Map<string, Promise<IsolationEvidence>>();

export function createSandbox(options: SandboxOptions = {}, settings: Pick<Settings, 'sandboxImage' | 'dockerHost'>): Sandbox {
  const image = options.image ?? settings.sandboxImage;
  let engine: Dockerode;
  try {
    // Constructing talks to no engine; only a malformed DOCKER_HOST throws here.
    engine = new Dockerode(options.engine);
  } catch (err) {
    throw new Error(`cannot configure the docker engine client (check DOCKER_HOST): ${(err as Error).message}`);
  }
  const reference = new DockerBackend({ image, docker: engine, limits: options.limits });
  const backend = options.override ? reference.withOverride(options.override) : reference;
  const key = JSON.stringify({
    engine: options.engine ?? settings.dockerHost ?? 'default',
    declared: reference.settings(),
    actual: backend.settings(),
  });

  const isolation = (): Promise<IsolationEvidence> => {
    let current = measured.get(key);
    if (!current) {
      current = measure(reference, options.override).then((evidence) => {
        // Only a measurement is kept; see the header comment.
        if (evidence.reason_detail !== undefined) measured.delete(key);
        return evidence;
      });
      measured.set(key, current);
    }
    return current;
  };

  const warmUp = (): void => {
    void reference
      .removeOrphans()
      .catch(() => 0) // no engine: nothing to clean, and the probe records why
      .then(() => isolation());
  };

  const others = new Map<string, Sandbox>();
  const forImage = (other: string): Sandbox => {
    if (other === image) return sandbox;
    let found = others.get(other);
    if (!found) others.set(other, (found = createSandbox({ ...options, image: other }, settings)));
    return found;
  };
  const sandbox: Sandbox = { backend, isolation, warmUp, forImage };
  return sandbox;
}

async function measure(reference: DockerBackend, override: SettingsOverride | undefined): Promise<IsolationEvidence> {
  try {
    const report = await probeIsolation(reference, { override });
    return { ...report, settings: withoutHostSides(report.settings) };
  } catch (err) {
    // An unexpected failure of the probe itself is evidence of nothing: never verified. Its
    // message may name host folders (the probe's scratch folder), which the trace must not hold.
    const message = withoutHostFolders((err as Error)?.message ?? String(err));
    return {
      verified: false,
      checks: { probe: { ok: false, detail: `the probe could not run: ${message}` } },
      image_id: null,
      settings: withoutHostSides((override ? reference.withOverride(override) : reference).settings()),
      reason_detail: 'probe_error',
    };
  }
}

/** Host folders a message may name, longest first, with the placeholder that replaces each. */
function hostRoots(): [string, string][] {
  const roots = new Map<string, string>();
  const add = (path: string, label: string) => {
    if (path === '/' || path === '') return;
    roots.set(path, label);
    try {
      roots.set(realpathSync(path), label);
    } catch {
      // a folder that does not exist cannot be named
    }
  };
  add(tmpdir(), '<tmp>');
  add(homedir(), '<home>');
  add(process.cwd(), '<cwd>');
  return [...roots.entries()].sort((a, b) => b[0].length - a[0].length);
}

export function withoutHostFolders(message: string): string {
  let s = message;
  for (const [root, label] of hostRoots()) s = s.split(root).join(label);
  return s;
}

/**
 * The settings as recorded: the host side of a deliberate bind mount (an override's `Binds`) is
 * dropped. Everything else in the settings is container-side (`/workspace`, `/tmp`) and stays.
 */
export function withoutHostSides(settings: ContainerSettings): ContainerSettings {
  const hc = settings.hostConfig as ContainerSettings['hostConfig'] & { Binds?: string[] };
  if (!hc.Binds) return settings;
  const Binds = hc.Binds.map((b) => `<host>:${b.split(':').slice(1).join(':')}`);
  return { ...settings, hostConfig: { ...hc, Binds } as ContainerSettings['hostConfig'] };
}
