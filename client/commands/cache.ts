/** `cache`: the setup cache (SPEC section 11), the images of successful setups in the worker's engine. */
import { command, UsageError } from '../command';
import { out } from './shared';

const mib = (n: number) => (n < 1048576 ? `${(n / 1024).toFixed(1)} KiB` : `${(n / 1048576).toFixed(1)} MiB`);

export const cache = command({
  name: 'cache',
  usage: ['cache list [--json]', 'cache prune [--json]'],
  summary:
    "the setup cache of this machine's engine: list the images of successful setups (key, size, base image and tree,\n" +
    'commands, allow list), or remove them all (an image a container still uses is kept and named)',
  options: {
    json: { kind: 'flag' },
  },
  // Talks to the Docker engine only (DOCKER_HOST, as the worker's backend), never to Temporal.
  offline: () => true,
  check(positionals) {
    if (positionals.length !== 1 || !['list', 'prune'].includes(positionals[0])) throw new UsageError('cache takes one of: list, prune');
  },
  async runOffline(_settings, positionals, values) {
    const [{ default: Dockerode }, cached] = await Promise.all([import('dockerode'), import('../../sandbox/setup/cache')]);
    const docker = new Dockerode();
    if (positionals[0] === 'list') {
      const images = await cached.listSetupImages(docker);
      if (values.json) out(images);
      else if (images.length === 0) out('no setup images');
      else {
        for (const i of images) {
          out(
            `${i.key.slice(0, 16)}  ${mib(i.layer_bytes).padStart(10)}  ${new Date(i.created * 1000).toISOString()}  base ${i.base_image?.slice(7, 19) ?? '?'} tree ${i.base_tree?.slice(0, 12) ?? '?'}  allow [${i.allow.join(', ')}]`,
          );
          for (const c of i.commands) out(`    ${c}`);
        }
      }
      return 0;
    }
    const { removed, kept } = await cached.pruneSetupImages(docker);
    if (values.json) out({ removed: removed.map((i) => i.key), kept: kept.map((k) => ({ key: k.image.key, why: k.why })) });
    else {
      out(`removed ${removed.length} setup image(s) (${mib(removed.reduce((n, i) => n + i.layer_bytes, 0))} of setup layers)`);
      for (const k of kept) out(`kept ${k.image.key.slice(0, 16)}: ${k.why}`);
    }
    return 0;
  },
});
