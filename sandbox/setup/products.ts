/**
 * The workspace and the setup image. A setup runs on a copy of the workspace inside its container
 * (`/workspace`, owned by root), never on the host's folder, so what it leaves there is part of
 * the image it is committed to, and a cached image carries it to the next run. After the setup
 * (ran or cached), `applyProducts` writes what the image's `/workspace` has beyond the base tree
 * into the run's workspace, and the workspace as it is then becomes the baseline: setup products
 * (node_modules, *.egg-info, a vendored folder) are neither in the diff nor protected changes,
 * nor part of a branch.
 *
 * The setup may only add: a file of the base tree changed or deleted, a special file, or a path
 * the workspace cannot hold (`..`, `.git`) refuses the setup, naming the path.
 *
 * Hazards: the archive comes from a container the setup controlled. Names are checked like a
 * tree's; a file's bytes are streamed into a temporary file of the control folder (any size, one
 * chunk in memory) and hard-linked into place, which fails on a name that exists, below folders
 * made here and checked with lstat; links are made last and never followed, modes are reduced to
 * 0644/0755, owners are the worker's.
 * Idempotent: the pre-setup workspace is kept in the control folder until the caller marks the
 * setup done, and every attempt starts again from it.
 */
import { randomUUID, createHash } from 'node:crypto';
import {
  chmodSync,
  closeSync,
  existsSync,
  linkSync,
  lstatSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeSync,
} from 'node:fs';
import { dirname, join } from 'node:path';
import type { Readable } from 'node:stream';
import type Dockerode from 'dockerode';
import tar from 'tar-stream';
import { writeFileAtomic } from '../../host/files';
import { engineError, MOUNT_WORKSPACE, removeContainer } from '../backends/docker';
import { copyRegular } from '../../workspace/hostile-read';
import { unsafeTreePath } from '../../workspace/listing';
import type { ManifestEntry, RunPaths } from '../../workspace/workspace';
import { offThread } from '../../workspace/thread';

/** A setup that left something other than additions in the workspace. */
export class SetupProductError extends Error {
  override name = 'SetupProductError';
}

const preSetup = (paths: RunPaths) => join(paths.control, 'pre-setup');
const preSetupManifest = (paths: RunPaths) => join(paths.control, 'pre-setup-manifest.json');

/** The workspace as prepared (the base tree), kept until the setup is done; the same on every attempt. */
export async function keepPreSetup(paths: RunPaths): Promise<void> {
  if (existsSync(preSetup(paths))) return;
  const call = { key: paths.workspace };
  writeFileAtomic(preSetupManifest(paths), JSON.stringify(await offThread('baselineManifest', [paths], call)), { tmpDir: paths.tmp });
  const tmp = `${preSetup(paths)}.tmp`;
  await offThread('remove', [tmp], call);
  await offThread('copyTree', [paths.baseline, tmp], call);
  renameSync(tmp, preSetup(paths));
}

/** Puts the workspace back as it was prepared (a refused setup's products go). */
export async function restorePreSetup(paths: RunPaths): Promise<void> {
  const call = { key: paths.workspace };
  await offThread('remove', [paths.workspace], call);
  await offThread('copyTree', [preSetup(paths), paths.workspace], call);
}

/** Removes the kept pre-setup workspace (after the setup is marked done). */
export async function dropPreSetup(paths: RunPaths): Promise<void> {
  await offThread('remove', [preSetup(paths)], { key: paths.workspace });
  rmSync(preSetupManifest(paths), { force: true });
}

/** The pre-setup workspace as a tar stream for the setup container: `workspace/...`, owned by root. */
export function workspaceArchive(paths: RunPaths): Readable {
  const pack = tar.pack();
  const root = preSetup(paths);
  const entries = JSON.parse(readFileSync(preSetupManifest(paths), 'utf8')) as ManifestEntry[];
  const base = { uid: 0, gid: 0, uname: 'root', gname: 'root', mtime: new Date(0) };
  void (async () => {
    try {
      const add = (header: tar.Headers, body?: Buffer) =>
        new Promise<void>((resolve, reject) => pack.entry(header, body ?? '', (err) => (err ? reject(err) : resolve())));
      await add({ ...base, name: 'workspace/', type: 'directory', mode: 0o755 });
      for (const e of entries) {
        const name = `workspace/${e.path}`;
        if (e.kind === 'dir') await add({ ...base, name: `${name}/`, type: 'directory', mode: 0o755 });
        else if (e.kind === 'file')
          await add({ ...base, name, type: 'file', mode: e.executable ? 0o755 : 0o644 }, readFileSync(join(root, e.path)));
        else if (e.kind === 'symlink') await add({ ...base, name, type: 'symlink', linkname: e.target, mode: 0o777 });
      }
      pack.finalize();
    } catch (err) {
      pack.destroy(err as Error);
    }
  })();
  return pack;
}

interface Seen {
  kind: 'file' | 'symlink' | 'dir';
  digest?: string;
  executable?: boolean;
  target?: string;
}

function ensureFolder(root: string, rel: string): void {
  let dir = root;
  for (const part of rel.split('/')) {
    dir = join(dir, part);
    const st = lstatSync(dir, { throwIfNoEntry: false });
    if (!st) mkdirSync(dir, { mode: 0o755 });
    else if (!st.isDirectory()) throw new SetupProductError(`the setup left ${rel} below something that is not a folder`);
  }
}

/**
 * Writes into the run's workspace, reset to the pre-setup copy, what the image's `/workspace` has
 * beyond it, and makes the result the baseline. Returns the number of files and links added.
 */
export async function applyProducts(
  docker: Dockerode,
  imageId: string,
  paths: RunPaths,
  newFiles: number,
): Promise<{ added: number; workspace_digest: string }> {
  const base = new Map((JSON.parse(readFileSync(preSetupManifest(paths), 'utf8')) as ManifestEntry[]).map((e) => [e.path, e]));
  await restorePreSetup(paths);

  let container: Dockerode.Container | null = null;
  let added = 0;
  try {
    // Never started: only its file system is read.
    container = await docker.createContainer({
      Image: imageId,
      Cmd: ['/'],
      Entrypoint: [],
      HostConfig: { NetworkMode: 'none' },
      Labels: {},
    });
    const archive = (await container.getArchive({ path: MOUNT_WORKSPACE })) as unknown as Readable;
    const seen = new Map<string, Seen>();
    const links: [string, string][] = [];
    await new Promise<void>((resolve, reject) => {
      const extract = tar.extract();
      extract.on('entry', (header, stream, next) => {
        // A file's bytes go to a temporary file as they come, hashed on the way: a setup may
        // leave a file of any size, and the worker holds one chunk of it at a time.
        const body = header.type === 'file' || header.type === 'contiguous-file' ? new TempBody(paths) : null;
        stream.on('data', (c: Buffer) => {
          try {
            body?.write(c);
          } catch (err) {
            stream.destroy(err as Error);
          }
        });
        stream.on('error', (err) => {
          body?.discard();
          reject(err);
        });
        stream.on('end', () => {
          try {
            const rel = header.name.replace(/^workspace(\/|$)/, '').replace(/\/+$/, '');
            if (rel !== '') {
              const entry = takeEntry(rel, header, body, base, seen, paths);
              if (entry === 'added') added++;
              // Bounded before it is all written: the undo of a refused setup walks what it left.
              if (seen.size - base.size > newFiles)
                throw new SetupProductError(
                  `the setup left more than ${newFiles} new files and folders in the workspace (AGENT_REPOSITORY_LIMITS.new_files)`,
                );
              if (entry === 'link') links.push([rel, header.linkname ?? '']);
            }
            body?.discard();
            next();
          } catch (err) {
            body?.discard();
            reject(err);
          }
        });
      });
      extract.on('finish', resolve);
      extract.on('error', reject);
      archive.on('error', reject);
      archive.pipe(extract);
    });
    for (const [path, e] of base) {
      const s = seen.get(path);
      if (!s) throw new SetupProductError(`the setup removed ${path}, a path of the base tree`);
      if (s.kind !== e.kind) throw new SetupProductError(`the setup changed ${path} (a ${e.kind} of the base tree)`);
    }
    // Links last, so no file above was written through one.
    for (const [path, target] of links) {
      const parent = dirname(path);
      if (parent !== '.') ensureFolder(paths.workspace, parent);
      symlinkSync(target, join(paths.workspace, path));
      added++;
    }
  } catch (err) {
    if (err instanceof SetupProductError) throw err;
    throw engineError(err);
  } finally {
    if (container) await removeContainer(container);
  }
  const call = { key: paths.workspace };
  await offThread('remove', [paths.baseline], call);
  await offThread('copyTree', [paths.workspace, paths.baseline], call);
  return { added, workspace_digest: await offThread('writeBaselineManifest', [paths], call) };
}

/** A file entry's bytes on their way: a temporary file of the control folder and their digest. */
class TempBody {
  readonly path: string;
  private readonly fd: number;
  private readonly hash = createHash('sha256');
  private closed = false;
  digest = '';

  constructor(paths: RunPaths) {
    mkdirSync(paths.tmp, { recursive: true });
    this.path = join(paths.tmp, `product-${randomUUID()}`);
    this.fd = openSync(this.path, 'wx', 0o600);
  }

  write(chunk: Buffer): void {
    this.hash.update(chunk);
    for (let off = 0; off < chunk.length;) off += writeSync(this.fd, chunk, off, chunk.length - off);
  }

  /** Ends the writing; the digest of everything written. */
  finish(): string {
    if (!this.closed) {
      closeSync(this.fd);
      this.closed = true;
      this.digest = this.hash.digest('hex');
    }
    return this.digest;
  }

  discard(): void {
    if (!this.closed) {
      closeSync(this.fd);
      this.closed = true;
    }
    rmSync(this.path, { force: true });
  }
}

/** Puts a finished temporary file at `rel` below `root`, a path that must not exist (link, then unlink). */
function placeFile(root: string, rel: string, tmp: string, executable: boolean): void {
  const parent = dirname(rel);
  if (parent !== '.') ensureFolder(root, parent);
  chmodSync(tmp, executable ? 0o755 : 0o644);
  try {
    linkSync(tmp, join(root, rel));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') throw new SetupProductError(`the setup left ${rel} twice in its archive`);
    throw err;
  }
}

/** One archive entry: checked against the base tree, written when it is new. */
function takeEntry(
  rel: string,
  header: tar.Headers,
  body: TempBody | null,
  base: Map<string, ManifestEntry>,
  seen: Map<string, Seen>,
  paths: RunPaths,
): 'base' | 'added' | 'link' | 'folder' {
  const root = paths.workspace;
  const unsafe = unsafeTreePath(rel);
  if (unsafe !== null)
    throw new SetupProductError(
      `the setup left ${JSON.stringify(rel)} in the workspace, a path with ${unsafe}, which a workspace cannot hold`,
    );
  const before = base.get(rel);
  switch (header.type) {
    case 'directory':
      seen.set(rel, { kind: 'dir' });
      if (before && before.kind !== 'dir') throw new SetupProductError(`the setup replaced ${rel} of the base tree with a folder`);
      if (!before) ensureFolder(root, rel);
      return 'folder';
    case 'file':
    case 'contiguous-file':
    case 'link': {
      // A hard link's bytes are those of the file it names, which the archive held before it: a copy of its own.
      let tmp: string;
      let digest: string;
      let copy: string | null = null;
      if (header.type === 'link') {
        const target = (header.linkname ?? '').replace(/^workspace\//, '');
        const st = lstatSync(join(root, target), { throwIfNoEntry: false });
        if (unsafeTreePath(target) !== null || !st?.isFile())
          throw new SetupProductError(
            `the setup left ${rel}, a hard link to ${JSON.stringify(header.linkname)}, which is not a file of the workspace`,
          );
        mkdirSync(paths.tmp, { recursive: true });
        copy = tmp = join(paths.tmp, `product-${randomUUID()}`);
        digest = copyRegular(join(root, target), tmp, target);
      } else {
        tmp = body!.path;
        digest = body!.finish();
      }
      try {
        const executable = ((header.mode ?? 0o644) & 0o111) !== 0;
        seen.set(rel, { kind: 'file', digest, executable });
        if (before) {
          if (before.kind !== 'file' || before.digest !== digest || before.executable !== executable)
            throw new SetupProductError(`the setup changed ${rel}, a file of the base tree`);
          return 'base';
        }
        placeFile(root, rel, tmp, executable);
        return 'added';
      } finally {
        if (copy !== null) rmSync(copy, { force: true });
      }
    }
    case 'symlink':
      seen.set(rel, { kind: 'symlink', target: header.linkname ?? '' });
      if (before) {
        if (before.kind !== 'symlink' || before.target !== header.linkname)
          throw new SetupProductError(`the setup changed ${rel}, a link of the base tree`);
        return 'base';
      }
      return 'link';
    default:
      throw new SetupProductError(
        `the setup left ${rel} in the workspace, a ${header.type ?? 'special'} file, which a workspace cannot hold`,
      );
  }
}
