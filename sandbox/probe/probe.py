"""The isolation probe (sandbox/probe/isolation.ts runs it in a sandbox container).

Run as `python3 -c <this file's text> <config>`, where config is a JSON object:
{"targets": [[host, port], ...], "pids_bound": n, "memory_bound": bytes}. It tries things that
must fail and prints exactly one JSON object of facts on its last stdout line; the verdicts are
made on the host, against the settings the backend declares. Routes, sockets and resolvers are
read from /proc and /etc, never used: nothing is sent to learn them, and the only connections
tried go to the host listener's addresses in `targets`.

Standard library only, Python 3.7 and later: it runs on the sandbox image's python3. The parsing
functions are pure and tested on sample /proc text (tests/probe.test.ts).
"""
import errno
import json
import os
import socket
import subprocess
import sys


def err_name(e):
    if isinstance(e, OSError) and e.errno:
        return errno.errorcode.get(e.errno, str(e.errno))
    return type(e).__name__


def connect(host, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect((host, port))
        return 'connected'
    except socket.timeout:
        return 'timeout'
    except OSError as e:
        return err_name(e)
    finally:
        s.close()


def read_lines(path):
    try:
        with open(path) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def hex4(h):
    """An IPv4 address as /proc/net/route and /proc/net/tcp write it: 8 hex digits, little-endian."""
    n = int(h, 16)
    return '%d.%d.%d.%d' % (n & 255, (n >> 8) & 255, (n >> 16) & 255, (n >> 24) & 255)


def hex6(h):
    """An IPv6 address as /proc/net/ipv6_route writes it: 32 hex digits, in order."""
    return ':'.join(h[i:i + 4] for i in range(0, 32, 4))


def hex6_words(a):
    """An IPv6 address as /proc/net/tcp6 writes it: four 32-bit words, each little-endian."""
    return hex6(''.join(a[i:i + 8][j:j + 2] for i in range(0, 32, 8) for j in (6, 4, 2, 0)))


def parse_routes(route_lines, ipv6_route_lines):
    """The routes of /proc/net/route (with its header line) and /proc/net/ipv6_route (without)."""
    routes = []
    for line in route_lines[1:]:
        f = line.split()
        if len(f) >= 8:
            routes.append({'family': 'ipv4', 'iface': f[0], 'dest': hex4(f[1]), 'mask': hex4(f[7])})
    for line in ipv6_route_lines:
        f = line.split()
        if len(f) >= 10:
            routes.append({'family': 'ipv6', 'iface': f[9], 'dest': hex6(f[0]), 'mask': str(int(f[1], 16))})
    return routes


def parse_sockets(lines, proto, wanted_state, decode):
    """`addr:port/proto` of the sockets in `wanted_state` of a /proc/net/{tcp,udp}[6] table (with its header)."""
    out = []
    for line in lines[1:]:
        f = line.split()
        if len(f) >= 4 and f[3] == wanted_state:
            addr, port = f[1].split(':')
            out.append('%s:%d/%s' % (decode(addr), int(port, 16), proto))
    return out


def listening_sockets(read):
    """Listening TCP (state 0A) and bound UDP (state 07) sockets of this network namespace; `read` reads a file's lines."""
    return (parse_sockets(read('/proc/net/tcp'), 'tcp', '0A', hex4)
            + parse_sockets(read('/proc/net/tcp6'), 'tcp', '0A', hex6_words)
            + parse_sockets(read('/proc/net/udp'), 'udp', '07', hex4)
            + parse_sockets(read('/proc/net/udp6'), 'udp', '07', hex6_words))


def parse_nameservers(resolv_lines):
    return [line.split()[1] for line in resolv_lines if line.startswith('nameserver') and len(line.split()) > 1]


def parse_status(status_lines, keys=('NoNewPrivs', 'CapEff', 'CapPrm', 'CapBnd', 'CapAmb', 'Seccomp')):
    """The named fields of /proc/self/status (None when absent)."""
    status = {}
    for line in status_lines:
        k, _, v = line.partition(':')
        status[k] = v.strip()
    return {k: status.get(k) for k in keys}


def parse_mount_targets(mountinfo_lines):
    return sorted({line.split()[4] for line in mountinfo_lines})


def try_write(path):
    try:
        with open(path, 'w') as f:
            f.write('probe')
        os.unlink(path)
        return 'written'
    except OSError as e:
        return err_name(e)


def fork_bound(bound):
    """Forks up to `bound` children that block on a pipe until the parent closes it."""
    r, w = os.pipe()
    kids, stop = [], 'bound'
    for _ in range(bound):
        try:
            pid = os.fork()
        except OSError as e:
            stop = err_name(e)
            break
        if pid == 0:
            os.close(w)
            try:
                os.read(r, 1)
            finally:
                os._exit(0)
        kids.append(pid)
    os.close(w)
    for pid in kids:
        os.waitpid(pid, 0)
    os.close(r)
    return {'forked': len(kids), 'stopped_by': stop}


# Run in a child, so the probe survives the OOM kill and can report it. The child volunteers as
# the OOM killer's first choice.
ALLOC = r'''
import sys
try:
    with open('/proc/self/oom_score_adj', 'w') as f:
        f.write('1000')
except OSError:
    pass
step, bound, held, n = 16 << 20, int(sys.argv[1]), [], 0
while n < bound:
    held.append(b'\x01' * step)
    n += step
    print(n, flush=True)
print('bound', flush=True)
'''


def alloc_outcome(stdout, stderr, returncode):
    """What the allocating child's output says: how far it got and what stopped it."""
    lines = stdout.split()
    allocated = max([int(x) for x in lines if x.isdigit()] or [0])
    outcome = 'bound' if 'bound' in lines else ('MemoryError' if 'MemoryError' in stderr else 'exit:%d' % returncode)
    return {'allocated': allocated, 'outcome': outcome, 'returncode': returncode}


def alloc_bound(bound):
    try:
        p = subprocess.run([sys.executable, '-c', ALLOC, str(bound)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=60)
        return alloc_outcome(p.stdout, p.stderr, p.returncode)
    except Exception as e:
        return {'allocated': 0, 'outcome': 'probe_error:' + type(e).__name__, 'returncode': None}


def proc1_environ():
    try:
        with open('/proc/1/environ', 'rb') as f:
            return [e.decode('utf-8', 'replace') for e in f.read().split(b'\0') if e]
    except OSError as e:
        return 'unreadable:' + err_name(e)


def main(cfg):
    facts = {}
    facts['net'] = [{'target': '%s:%d' % (h, p), 'result': connect(h, p)} for h, p in cfg['targets']]
    facts['interfaces'] = sorted(os.listdir('/sys/class/net'))
    facts['routes'] = parse_routes(read_lines('/proc/net/route'), read_lines('/proc/net/ipv6_route'))
    facts['sockets'] = listening_sockets(read_lines)
    facts['nameservers'] = parse_nameservers(read_lines('/etc/resolv.conf'))
    facts['writes'] = {p: try_write(p) for p in ['/probe', '/usr/probe', '/workspace/probe', '/out/probe']}
    facts['environ'] = dict(os.environ)
    facts['proc1_environ'] = proc1_environ()
    facts['docker_sock'] = {p: os.path.exists(p) for p in ['/var/run/docker.sock', '/run/docker.sock']}
    facts['mounts'] = parse_mount_targets(read_lines('/proc/self/mountinfo'))
    facts['ids'] = {'uid': os.getuid(), 'euid': os.geteuid(), 'gid': os.getgid(), 'egid': os.getegid(),
                    'groups': os.getgroups()}
    facts['status'] = parse_status(read_lines('/proc/self/status'))
    facts['pids'] = fork_bound(cfg['pids_bound'])
    facts['memory'] = alloc_bound(cfg['memory_bound'])
    print(json.dumps(facts))


if __name__ == '__main__':
    main(json.loads(sys.argv[1]))
