/**
 * The isolation probe's Python (sandbox/probe/probe.py): shipped with the build, compiled
 * and linted (pyflakes, pinned in the tools environment), and its parsing functions run on sample
 * /proc and /etc text. Running it for real, in a sandbox container, is the docker suite's part.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { PROBE_FILE, probeSource } from '../sandbox/probe/isolation';
import { PROJECT_ROOT } from '../host/settings';
import { toolsBinDir } from '../host/tools-env';
import { SETTINGS } from './helpers/run-dir';

const SOURCE = join(PROJECT_ROOT, 'sandbox', 'probe', 'probe.py');
const ENV = { ...process.env, PYTHONDONTWRITEBYTECODE: '1' };

/** Calls `expr` with the probe imported as `probe` and `args` (JSON) bound to `a`; returns its JSON result. */
function probe(expr: string, args: unknown = null): unknown {
  const script = `import json, sys\nsys.path.insert(0, ${JSON.stringify(dirname(PROBE_FILE))})\nimport probe\na = json.loads(sys.argv[1])\nprint(json.dumps(${expr}))`;
  return JSON.parse(execFileSync('python3', ['-c', script, JSON.stringify(args)], { encoding: 'utf8', env: ENV }));
}

describe('the probe file', () => {
  it('ships with the build, next to the compiled module that reads it, identical to its source', () => {
    expect(PROBE_FILE).toBe(join(PROJECT_ROOT, 'dist', 'sandbox', 'probe', 'probe.py'));
    expect(probeSource()).toBe(readFileSync(SOURCE, 'utf8'));
  });

  it('compiles, and pyflakes finds nothing in it', () => {
    expect(() =>
      execFileSync('python3', ['-c', 'import sys; compile(open(sys.argv[1]).read(), sys.argv[1], "exec")', SOURCE], { env: ENV }),
    ).not.toThrow();
    const lint = (() => {
      try {
        return execFileSync(join(toolsBinDir(SETTINGS), 'python3'), ['-m', 'pyflakes', SOURCE], {
          encoding: 'utf8',
          env: ENV,
          stdio: ['ignore', 'pipe', 'pipe'],
        });
      } catch (err) {
        const e = err as { stdout?: string; stderr?: string };
        return `${e.stdout ?? ''}${e.stderr ?? ''}`;
      }
    })();
    expect(lint).toBe('');
  });

  it('does nothing but define its functions when imported', () => {
    expect(probe('sorted(n for n in ("main", "parse_routes", "listening_sockets") if callable(getattr(probe, n)))')).toEqual([
      'listening_sockets',
      'main',
      'parse_routes',
    ]);
  });
});

describe('the probe reading /proc and /etc text', () => {
  it('reads IPv4 and IPv6 routes with their interfaces, skipping the header and short lines', () => {
    const route = [
      'Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT',
      'eth0\t00000000\t010011AC\t0003\t0\t0\t0\t00000000\t0\t0\t0',
      'eth0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0',
      'short\tline',
    ];
    const ipv6 = [
      '00000000000000000000000000000001 80 00000000000000000000000000000000 00 00000000000000000000000000000000 00000000 00000001 00000000 00000001       lo',
    ];
    expect(probe('probe.parse_routes(a[0], a[1])', [route, ipv6])).toEqual([
      { family: 'ipv4', iface: 'eth0', dest: '0.0.0.0', mask: '0.0.0.0' },
      { family: 'ipv4', iface: 'eth0', dest: '172.17.0.0', mask: '255.255.0.0' },
      { family: 'ipv6', iface: 'lo', dest: '0000:0000:0000:0000:0000:0000:0000:0001', mask: '128' },
    ]);
    expect(probe('probe.parse_routes([], [])', null)).toEqual([]);
  });

  it('lists listening TCP and bound UDP sockets of both families, and nothing in another state', () => {
    const header = '  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode';
    const files = {
      '/proc/net/tcp': [
        header,
        '   0: 0100007F:0035 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1',
        '   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 2 1',
      ],
      '/proc/net/tcp6': [
        header,
        '   0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3 1',
      ],
      '/proc/net/udp': [header, '   0: 0B00007F:A1B2 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4 2'],
      '/proc/net/udp6': [header],
    };
    expect(probe('probe.listening_sockets(lambda path: a[path])', files)).toEqual([
      '127.0.0.1:53/tcp',
      '0000:0000:0000:0000:0000:0000:0000:0001:8080/tcp',
      '127.0.0.11:41394/udp',
    ]);
  });

  it('reads nameservers, status fields and mount targets', () => {
    expect(
      probe('probe.parse_nameservers(a)', [
        '# generated',
        'search example',
        'nameserver 127.0.0.11',
        'nameserver',
        'options ndots:0',
        'nameserver ::1',
      ]),
    ).toEqual(['127.0.0.11', '::1']);
    const status = [
      'Name:\tpython3',
      'NoNewPrivs:\t1',
      'CapEff:\t0000000000000000',
      'CapPrm:\t0000000000000000',
      'CapBnd:\t0000000000000000',
      'Seccomp:\t2',
    ];
    expect(probe('probe.parse_status(a)', status)).toEqual({
      NoNewPrivs: '1',
      CapEff: '0000000000000000',
      CapPrm: '0000000000000000',
      CapBnd: '0000000000000000',
      CapAmb: null,
      Seccomp: '2',
    });
    const mountinfo = [
      '600 500 0:50 / / ro,relatime - overlay overlay rw',
      '601 600 0:52 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw',
      '602 600 8:1 /runs/x/workspace /workspace ro,relatime - ext4 /dev/sda1 rw',
      '603 600 0:53 / /tmp rw,nosuid,nodev - tmpfs tmpfs rw,size=65536k',
      '604 601 0:52 /sys /proc/sys ro - proc proc rw',
    ];
    expect(probe('probe.parse_mount_targets(a)', mountinfo)).toEqual(['/', '/proc', '/proc/sys', '/tmp', '/workspace']);
  });

  it('tells how far the allocating child got and what stopped it', () => {
    expect(probe('probe.alloc_outcome(*a)', ['16777216\n33554432\n', '', -9])).toEqual({
      allocated: 33554432,
      outcome: 'exit:-9',
      returncode: -9,
    });
    expect(probe('probe.alloc_outcome(*a)', ['16777216\n', 'Traceback ...\nMemoryError\n', 1])).toEqual({
      allocated: 16777216,
      outcome: 'MemoryError',
      returncode: 1,
    });
    expect(probe('probe.alloc_outcome(*a)', ['16777216\nbound\n', '', 0])).toEqual({
      allocated: 16777216,
      outcome: 'bound',
      returncode: 0,
    });
    expect(probe('probe.alloc_outcome(*a)', ['', '', 137])).toEqual({ allocated: 0, outcome: 'exit:137', returncode: 137 });
  });

  it('names errors by errno, or by class when there is none', () => {
    expect(
      probe('[probe.err_name(OSError(13, "denied")), probe.err_name(ValueError("x")), probe.try_write("/nonexistent-dir/probe")]'),
    ).toEqual(['EACCES', 'ValueError', 'ENOENT']);
  });
});
