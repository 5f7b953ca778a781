/**
 * Which build of the harness this process runs: the package version and a digest of the compiled
 * tree (every JavaScript file of the build but the tests', the Python it ships, the isolation
 * probe, and the prompt versions it ships in dist/prompts). Two processes with the same id run
 * the same code; a rebuild after any source change gives a new id.
 */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join, relative } from 'node:path';

const DIST = join(__dirname, '..');

let cached: string | null = null;

export function buildId(): string {
  if (cached !== null) return cached;
  const hash = createHash('sha256');
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) {
        if (path !== join(DIST, 'tests')) walk(path);
      } else if (
        entry.name.endsWith('.js') ||
        entry.name.endsWith('.py') ||
        entry.name.endsWith('.sh') ||
        path.startsWith(join(DIST, 'prompts', ''))
      ) {
        hash
          .update(`${relative(DIST, path)}\0`)
          .update(readFileSync(path))
          .update('\0');
      }
    }
  };
  walk(DIST);
  const { version } = JSON.parse(readFileSync(join(DIST, '..', 'package.json'), 'utf8')) as { version: string };
  cached = `${version}+${hash.digest('hex').slice(0, 12)}`;
  return cached;
}

/** How a worker names itself to Temporal (pollers of a task queue show it): process, host and build. */
export function workerIdentity(pid: number = process.pid, build: string = buildId()): string {
  return `${pid}@${hostname()} build ${build}`;
}
