/**
 * The addresses a setup phase may never reach, whatever its allow list says (SPEC section 11), and
 * the packet filter that refuses them a second time, below squid, in the proxy's own network
 * namespace.
 *
 * The ranges: loopback, link-local, private (RFC 1918), shared (100.64.0.0/10), unspecified
 * (0.0.0.0/8), unique-local, multicast; and, computed when each setup starts, every address of
 * this machine's interfaces (`os.networkInterfaces()`) and every subnet and gateway of the
 * engine's networks (its bridges' gateways are this machine's addresses on them). The operator's
 * opened ranges (AGENT_EGRESS_OPEN_CIDRS) win over all of these, in squid and in the filter.
 *
 * Hazard: "this machine" is the worker's machine. With DOCKER_HOST naming another engine host,
 * that host's own addresses are not listed (its bridges' are, through the engine's networks).
 */
import { networkInterfaces } from 'node:os';
import { isIP } from 'node:net';
import type Dockerode from 'dockerode';
import { engineError } from '../backends/docker';
import type { ForbiddenRanges } from './squid';

/** The fixed ranges, in the order their reasons are given (an address in two is named by the first). */
export const FIXED_RANGES: ForbiddenRanges = [
  { reason: 'loopback', cidrs: ['127.0.0.0/8', '::1/128'] },
  { reason: 'link_local', cidrs: ['169.254.0.0/16', 'fe80::/10'] },
  { reason: 'private', cidrs: ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16'] },
  { reason: 'shared', cidrs: ['100.64.0.0/10'] },
  { reason: 'unspecified', cidrs: ['0.0.0.0/8', '::/128'] },
  { reason: 'unique_local', cidrs: ['fc00::/7'] },
  { reason: 'multicast', cidrs: ['224.0.0.0/4', 'ff00::/8'] },
];

/** A single address as a CIDR (a zone index, `%eth0`, dropped). */
const host = (address: string) => {
  const bare = address.split('%')[0];
  return `${bare}/${isIP(bare) === 6 ? 128 : 32}`;
};

/** The fixed ranges, this machine's addresses and the engine's networks, as they are now. */
export async function forbiddenRanges(docker: Dockerode): Promise<ForbiddenRanges> {
  const own = Object.values(networkInterfaces()).flatMap((list) => (list ?? []).map((a) => host(a.address)));
  let networks: Dockerode.NetworkInspectInfo[];
  try {
    networks = await docker.listNetworks();
  } catch (err) {
    throw engineError(err);
  }
  const engine = networks.flatMap((n) =>
    (n.IPAM?.Config ?? []).flatMap((c) => [
      ...(c.Subnet && isIP(c.Subnet.split('/')[0]) ? [c.Subnet] : []),
      ...(c.Gateway && isIP(c.Gateway) ? [host(c.Gateway)] : []),
    ]),
  );
  return [...FIXED_RANGES, { reason: 'this_machine', cidrs: unique(own) }, { reason: 'engine_network', cidrs: unique(engine) }];
}

const unique = (list: string[]) => [...new Set(list)].sort();

export interface FilterRules {
  /** iptables-restore input for IPv4 and IPv6, and the number of OUTPUT rules each installs (checked after). */
  v4: { text: string; rules: number };
  v6: { text: string; rules: number };
}

/**
 * The proxy's packet filter: its own outgoing packets (the OUTPUT chain of its namespace), never
 * a client's. Accepted: the container's own loopback (squid's DNS at 127.0.0.1, the engine's
 * embedded resolver), the internal network (its clients), the operator's opened ranges, and DNS
 * (port 53, any address: the engine's resolver forwards from this namespace to the host's
 * resolvers, which may be private) only when squid resolves by DNS. Rejected: every forbidden
 * range, with an ICMP "administratively prohibited", so squid fails at once instead of timing
 * out. Everything else (public addresses) passes.
 */
export function filterRules(o: { clients: string; open: string[]; dns: boolean; forbidden: ForbiddenRanges }): FilterRules {
  const family = (v6: boolean) => {
    const mine = (cidr: string) => (isIP(cidr.split('/')[0]) === 6) === v6;
    const rules = [
      '-A OUTPUT -o lo -j ACCEPT',
      ...[o.clients, ...o.open].filter(mine).map((c) => `-A OUTPUT -d ${c} -j ACCEPT`),
      ...(o.dns ? ['-A OUTPUT -p udp --dport 53 -j ACCEPT', '-A OUTPUT -p tcp --dport 53 -j ACCEPT'] : []),
      ...o.forbidden
        .flatMap((f) => f.cidrs)
        .filter(mine)
        .map((c) => `-A OUTPUT -d ${c} -j REJECT --reject-with ${v6 ? 'icmp6-adm-prohibited' : 'icmp-admin-prohibited'}`),
    ];
    const text = ['*filter', ':INPUT ACCEPT [0:0]', ':FORWARD ACCEPT [0:0]', ':OUTPUT ACCEPT [0:0]', ...rules, 'COMMIT', ''].join('\n');
    return { text, rules: rules.length };
  };
  return { v4: family(false), v6: family(true) };
}
