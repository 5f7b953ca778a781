/**
 * The setup phase's network and its egress proxy: an internal engine network for the run, and a
 * squid container (docker/build-proxy-image.sh) that is on that network and on the network that
 * reaches upstream hosts. The setup's containers are on the internal network only, so the proxy
 * is their one peer.
 *
 * The internal network is a bridge marked internal (the engine forwards nothing off it) with no
 * address of the host on it (`inhibit_ipv4`): a container there has nothing of the host to
 * connect to, not even the gateway address a bridge normally gives the host.
 *
 * The packet filter. Before squid starts, a short-lived container of the proxy's image joins the
 * proxy's network namespace with NET_ADMIN (and no other capability) and installs the filter of
 * ranges.ts with iptables-restore, then checks that every rule is in place. Only then does squid
 * get its configuration (and so start): it never runs unfiltered. Why a container and not
 * `nsenter` from the host: it needs nothing of the worker's machine (no root there, no iptables
 * binary, the same engine even when DOCKER_HOST names another host), and the proxy itself never
 * holds a capability that could change the rules. A filter that cannot be installed stops the
 * setup as an infrastructure failure (ProxyStartError).
 *
 * Hazards:
 * - Credentials. squid's configuration holds the real header values. It goes to the proxy through
 *   its standard input into a tmpfs of the proxy container (memory, mode 0700, the proxy's user):
 *   it is never written to a file of the host or to a file system an image is made from, and it
 *   is gone with the container. Anything the proxy prints that the harness keeps (its log on a
 *   failure) is scrubbed of the values first.
 * - Leftovers. A worker killed mid-setup leaves the proxy, the setup container and the network;
 *   each carries its owner label, and the worker's reaper (removeOrphans) removes them.
 */
import { randomUUID } from 'node:crypto';
import { PassThrough } from 'node:stream';
import type Dockerode from 'dockerode';
import { engineError, ownerLabel, removeContainer, SANDBOX_LABEL } from '../backends/docker';
import { BackendUnavailableError } from '../backends/types';
import type { FilterRules } from './ranges';
import { PROXY_PORT } from './squid';
import { within } from './timing';

export const EGRESS_NETWORK_LABEL = 'egress';
export const PROXY_LABEL = 'proxy';
/** Where the proxy container keeps what it was given (a tmpfs). */
const RUN_DIR = '/run/agent';
export const PROXY_HOSTS_PATH = `${RUN_DIR}/hosts`;
/** The files of an intercepting proxy: the setup's certificate authority, squid's certificate store, the upstream CAs. */
export const PROXY_TLS = {
  caCert: `${RUN_DIR}/ca.pem`,
  caKey: `${RUN_DIR}/ca.key`,
  certDb: `${RUN_DIR}/certs`,
  upstreamCa: `${RUN_DIR}/upstream-ca.pem`,
} as const;
/** Separate the configuration, the hosts file and the upstream CAs on the proxy's standard input. */
const HOSTS_MARK = '#@@agent-hosts';
const UPSTREAM_CA_MARK = '#@@agent-upstream-ca';
/** Frame the setup CA's certificate (public) on the proxy's standard error. */
const CA_BEGIN = '#@@agent-ca-begin';
const CA_END = '#@@agent-ca-end';
const START_TIMEOUT_MS = 30_000;
/** Kept of the proxy's own log (its stderr), for a failure's detail. */
const PROXY_LOG_BYTES = 64 * 1024;

export interface EgressNetwork {
  name: string;
  subnet: string;
  /** The address a bridge would give the host; no one holds it (`inhibit_ipv4`), and the probe tries it. */
  gateway: string | null;
  remove(): Promise<void>;
}

/** A fresh internal network for one setup phase. */
export async function createEgressNetwork(docker: Dockerode): Promise<EgressNetwork> {
  const name = `coding-agent-egress-${randomUUID().slice(0, 12)}`;
  let network: Dockerode.Network;
  try {
    network = await docker.createNetwork({
      Name: name,
      Driver: 'bridge',
      Internal: true,
      CheckDuplicate: true,
      Options: { 'com.docker.network.bridge.inhibit_ipv4': 'true' },
      Labels: { [SANDBOX_LABEL]: EGRESS_NETWORK_LABEL, ...ownerLabel() },
    });
  } catch (err) {
    throw engineError(err);
  }
  const remove = async () => {
    try {
      await network.remove();
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode !== 404) throw engineError(err);
    }
  };
  try {
    const info = (await network.inspect()) as { IPAM?: { Config?: { Subnet?: string; Gateway?: string }[] } };
    const config = (info.IPAM?.Config ?? []).find((c) => c.Subnet && /^\d+\.\d+\.\d+\.\d+\/\d+$/.test(c.Subnet));
    if (!config?.Subnet) throw new Error(`the engine gave network ${name} no IPv4 subnet`);
    return { name, subnet: config.Subnet, gateway: config.Gateway ?? null, remove };
  } catch (err) {
    await remove();
    throw engineError(err);
  }
}

export interface RunningProxy {
  /** The proxy's container. */
  id: string;
  /** The proxy's address on the internal network. */
  address: string;
  port: number;
  /** An intercepting proxy's certificate authority (the certificate, PEM; its key never leaves the proxy); null for tunnels. */
  caCert: string | null;
  /** Stops squid, waits for its last access-log lines, removes the container; returns the end of squid's own log (scrub it before keeping it). */
  stop(): Promise<string>;
}

export interface ProxyOptions {
  image: string;
  network: EgressNetwork;
  /** The engine network through which the proxy reaches upstream hosts. */
  upstream: string;
  /** squid's configuration, made once the proxy's address is known. */
  config: (address: string) => string;
  /** The hosts file the proxy resolves names from, or null. */
  hosts: string | null;
  /** Intercept TLS with a certificate authority made in the proxy for this setup; `upstreamCa`: PEM it trusts upstream besides the system's. */
  intercept: { upstreamCa: string | null } | null;
  /** The packet filter installed in the proxy's network namespace before squid starts (ranges.ts). */
  filter: FilterRules;
  /** Each line of the access log (one per request), as squid writes it. */
  onRequest: (line: string) => void;
}

/** The proxy image's content id, or what to run when it is not there. */
async function proxyImageId(docker: Dockerode, name: string): Promise<string> {
  try {
    return (await docker.getImage(name).inspect()).Id;
  } catch (err) {
    if ((err as { statusCode?: number }).statusCode === 404) {
      throw new BackendUnavailableError(
        `egress proxy image ${name} not found; build it with docker/build-proxy-image.sh (scripts/ensure-docker.sh)`,
        'image_missing',
      );
    }
    throw engineError(err);
  }
}

/**
 * The proxy's shell. The configuration arrives on standard input; squid reads it from the tmpfs.
 * An intercepting proxy makes its certificate authority there too: the key is written by openssl
 * into the tmpfs and read by squid, and only the certificate is printed for the harness.
 */
function proxyScript(intercept: boolean): string {
  return [
    'umask 077',
    `cat > ${RUN_DIR}/input`,
    `sed -n '/^${HOSTS_MARK}$/,/^${UPSTREAM_CA_MARK}$/p' ${RUN_DIR}/input | sed '1d;$d' > ${PROXY_HOSTS_PATH}`,
    `sed -n '/^${UPSTREAM_CA_MARK}$/,$p' ${RUN_DIR}/input | tail -n +2 > ${PROXY_TLS.upstreamCa}`,
    `sed '/^${HOSTS_MARK}$/,$d' ${RUN_DIR}/input > ${RUN_DIR}/squid.conf`,
    `rm ${RUN_DIR}/input`,
    ...(intercept
      ? [
          `openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj '/CN=coding-agent setup CA' -keyout ${PROXY_TLS.caKey} -out ${PROXY_TLS.caCert} 2>/dev/null`,
          `/usr/lib/squid/security_file_certgen -c -s ${PROXY_TLS.certDb} -M 4MB >/dev/null`,
          `{ echo '${CA_BEGIN}'; cat ${PROXY_TLS.caCert}; echo '${CA_END}'; } >&2`,
        ]
      : []),
    `exec /usr/sbin/squid -N -f ${RUN_DIR}/squid.conf`,
  ].join(' && ');
}

/** Squid's container: the image's `proxy` user, every capability dropped, no-new-privileges, a read-only root and tmpfs folders. */
async function createProxyContainer(
  docker: Dockerode,
  image: string,
  script: string,
  network: EgressNetwork,
): Promise<Dockerode.Container> {
  try {
    return await docker.createContainer({
      name: `coding-agent-proxy-${randomUUID()}`,
      Image: image,
      Cmd: ['sh', '-c', script],
      Entrypoint: [],
      User: 'proxy',
      Env: ['PATH=/usr/sbin:/usr/bin:/sbin:/bin', 'LANG=C.UTF-8'],
      Labels: { [SANDBOX_LABEL]: PROXY_LABEL, ...ownerLabel() },
      OpenStdin: true,
      StdinOnce: true,
      AttachStdin: true,
      AttachStdout: true,
      AttachStderr: true,
      HostConfig: {
        NetworkMode: network.name,
        ReadonlyRootfs: true,
        Tmpfs: {
          [RUN_DIR]: 'rw,nosuid,nodev,size=8m,mode=0700,uid=13,gid=13',
          '/var/spool/squid': 'rw,nosuid,nodev,size=16m,uid=13,gid=13',
          '/tmp': 'rw,nosuid,nodev,size=16m',
        },
        CapDrop: ['ALL'],
        SecurityOpt: ['no-new-privileges'],
        PidsLimit: 64,
        Memory: 256 * 1024 * 1024,
        MemorySwap: 256 * 1024 * 1024,
        LogConfig: { Type: 'none', Config: {} },
      },
    });
  } catch (err) {
    throw engineError(err);
  }
}

/** Squid's output as it comes: stdout is the access log (one request a line), stderr its own log (the end kept). */
class ProxyOutput {
  private partial = '';
  stderr = '';
  ended: Promise<void> = Promise.resolve();

  constructor(private readonly onRequest: (line: string) => void) {}

  async attach(docker: Dockerode, container: Dockerode.Container): Promise<NodeJS.ReadWriteStream> {
    const stream = await container.attach({ stream: true, stdin: true, stdout: true, stderr: true, hijack: true });
    const out = new PassThrough();
    const err = new PassThrough();
    out.on('data', (b: Buffer) => {
      const lines = (this.partial + b.toString('utf8')).split('\n');
      this.partial = lines.pop() ?? '';
      for (const line of lines) if (line.trim() !== '') this.onRequest(line);
    });
    err.on('data', (b: Buffer) => (this.stderr = (this.stderr + b.toString('utf8')).slice(-PROXY_LOG_BYTES)));
    docker.modem.demuxStream(stream, out, err);
    this.ended = new Promise<void>((resolve) => {
      stream.on('end', resolve);
      stream.on('close', resolve);
      stream.on('error', () => resolve());
    });
    return stream;
  }

  /** The last line, when squid ended without a newline. */
  flush(): void {
    if (this.partial.trim() !== '') this.onRequest(this.partial);
    this.partial = '';
  }

  /** Until squid says it accepts connections; its exit or 30 s of silence is a ProxyStartError. */
  async accepting(container: Dockerode.Container): Promise<void> {
    const until = Date.now() + START_TIMEOUT_MS;
    while (!/Accepting (SSL bumped )?HTTP Socket connections/.test(this.stderr)) {
      const state = (await container.inspect()).State;
      if (!state.Running || Date.now() > until) {
        throw new ProxyStartError(
          `the egress proxy did not start (${state.Running ? 'no answer in 30 s' : `it exited with ${state.ExitCode}`})`,
          this.stderr,
        );
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

/**
 * Starts the proxy and returns once squid accepts connections. The shell waits for its standard
 * input, so nothing of squid runs until the packet filter holds.
 */
export async function startProxy(docker: Dockerode, o: ProxyOptions): Promise<RunningProxy> {
  const image = await proxyImageId(docker, o.image);
  const container = await createProxyContainer(docker, image, proxyScript(o.intercept !== null), o.network);
  const output = new ProxyOutput(o.onRequest);
  const removeAll = () => removeContainer(container);
  try {
    await docker.getNetwork(o.upstream).connect({ Container: container.id });
    const stream = await output.attach(docker, container);
    await container.start();
    const info = await container.inspect();
    const address = info.NetworkSettings.Networks[o.network.name]?.IPAddress;
    if (!address) throw new Error(`the proxy has no address on ${o.network.name}`);
    await installFilter(docker, image, container.id, o.filter);
    const hosts = o.hosts === null || o.hosts.endsWith('\n') ? (o.hosts ?? '') : `${o.hosts}\n`;
    const upstream = o.intercept?.upstreamCa ?? '';
    stream.end(`${o.config(address)}${HOSTS_MARK}\n${hosts}${UPSTREAM_CA_MARK}\n${upstream}`);
    await output.accepting(container);
    const ca = o.intercept
      ? new RegExp(`${CA_BEGIN}\\n(-----BEGIN CERTIFICATE-----\\n[\\s\\S]+?-----END CERTIFICATE-----)\\n${CA_END}`).exec(output.stderr)
      : null;
    if (o.intercept && !ca) throw new ProxyStartError('the egress proxy did not print its certificate authority', output.stderr);
    return {
      id: container.id,
      address,
      port: PROXY_PORT,
      caCert: ca ? `${ca[1]}\n` : null,
      async stop() {
        try {
          await container.stop({ t: 2 }).catch((e: unknown) => {
            if (![304, 404].includes((e as { statusCode?: number }).statusCode ?? 0)) throw e;
          });
          await within(output.ended, 5000, undefined);
        } finally {
          await removeAll();
        }
        output.flush();
        return output.stderr;
      },
    };
  } catch (err) {
    await removeAll();
    throw err instanceof ProxyStartError ? err : engineError(err);
  }
}

/**
 * Installs `rules` in the network namespace of container `target` from a container of `image`
 * with NET_ADMIN, and checks them; throws ProxyStartError when either fails.
 */
async function installFilter(docker: Dockerode, image: string, target: string, rules: FilterRules): Promise<void> {
  const script = [
    'printf %s "$AGENT_FILTER_V4" | iptables-restore',
    'printf %s "$AGENT_FILTER_V6" | ip6tables-restore',
    // What the kernel holds now, not what was asked: a rule that did not land fails the setup.
    'v4=$(iptables -S OUTPUT | grep -c "^-A OUTPUT")',
    'v6=$(ip6tables -S OUTPUT | grep -c "^-A OUTPUT")',
    '[ "$v4" = "$AGENT_FILTER_V4_RULES" ] && [ "$v6" = "$AGENT_FILTER_V6_RULES" ] || { echo "the filter holds $v4 IPv4 and $v6 IPv6 rules, not $AGENT_FILTER_V4_RULES and $AGENT_FILTER_V6_RULES" >&2; exit 3; }',
  ].join(' && ');
  let sidecar: Dockerode.Container;
  try {
    sidecar = await docker.createContainer({
      name: `coding-agent-proxy-filter-${randomUUID()}`,
      Image: image,
      Entrypoint: [],
      Cmd: ['sh', '-c', script],
      User: '0:0',
      Env: [
        'PATH=/usr/sbin:/usr/bin:/sbin:/bin',
        `AGENT_FILTER_V4=${rules.v4.text}`,
        `AGENT_FILTER_V6=${rules.v6.text}`,
        `AGENT_FILTER_V4_RULES=${rules.v4.rules}`,
        `AGENT_FILTER_V6_RULES=${rules.v6.rules}`,
      ],
      Labels: { [SANDBOX_LABEL]: PROXY_LABEL, ...ownerLabel() },
      AttachStdout: true,
      AttachStderr: true,
      HostConfig: {
        NetworkMode: `container:${target}`,
        CapDrop: ['ALL'],
        CapAdd: ['NET_ADMIN'],
        SecurityOpt: ['no-new-privileges'],
        ReadonlyRootfs: true,
        PidsLimit: 16,
        Memory: 64 * 1024 * 1024,
        LogConfig: { Type: 'none', Config: {} },
      },
    });
  } catch (err) {
    throw new ProxyStartError(`the egress proxy's packet filter could not be installed: ${(err as Error).message}`, '');
  }
  try {
    let output = '';
    const stream = await sidecar.attach({ stream: true, stdout: true, stderr: true, hijack: true });
    const sink = new PassThrough();
    sink.on('data', (b: Buffer) => (output = (output + b.toString('utf8')).slice(-4096)));
    docker.modem.demuxStream(stream, sink, sink);
    const ended = new Promise<void>((resolve) => {
      stream.on('end', resolve);
      stream.on('close', resolve);
      stream.on('error', () => resolve());
    });
    await sidecar.start();
    const { StatusCode } = (await sidecar.wait()) as { StatusCode: number };
    await within(ended, 2000, undefined);
    if (StatusCode !== 0)
      throw new ProxyStartError(
        `the egress proxy's packet filter could not be installed (exit ${StatusCode}): ${output.trim().split('\n').slice(-3).join(' / ')}`,
        '',
      );
  } catch (err) {
    throw err instanceof ProxyStartError
      ? err
      : new ProxyStartError(`the egress proxy's packet filter could not be installed: ${(err as Error).message}`, '');
  } finally {
    await removeContainer(sidecar);
  }
}

/** The proxy would not start; `log` is squid's own output (it may quote the configuration: scrub it). */
export class ProxyStartError extends Error {
  override name = 'ProxyStartError';
  constructor(
    message: string,
    readonly log: string,
  ) {
    super(message);
  }
}
