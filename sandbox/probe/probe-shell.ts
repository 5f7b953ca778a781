/**
 * The isolation probe for an image without Python: `probe.sh` (POSIX sh, plus `cat`, `nc` and
 * `sleep` of the image) reports raw facts; this file turns its output into the same facts the
 * Python probe reports (the same /proc parsing as probe.py), so one judge decides both. What the
 * shell probe could not measure is named in `missing` and fails its check: nothing is assumed.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ProbeFacts } from './facts';

export const SHELL_PROBE_FILE = join(__dirname, 'probe.sh');

let shellText: string | null = null;

/** The shell probe's source, read once (the build copies it next to this module). */
export function shellProbeSource(): string {
  shellText ??= readFileSync(SHELL_PROBE_FILE, 'utf8');
  return shellText;
}

/** The probe's argv: the script, then its arguments after the `$0` name. */
export function shellProbeArgv(config: { targets: [string, number][]; pids_bound: number; memory_bound: number }): string[] {
  return [
    'sh',
    '-c',
    shellProbeSource(),
    'probe',
    String(config.pids_bound),
    String(config.memory_bound),
    ...config.targets.map(([h, p]) => `${h}:${p}`),
  ];
}

// ---- /proc parsing, as probe.py does it ----

/** An IPv4 address as /proc/net/route and /proc/net/tcp write it: 8 hex digits, little-endian. */
export function hex4(h: string): string {
  const n = parseInt(h, 16);
  return [n & 255, (n >>> 8) & 255, (n >>> 16) & 255, (n >>> 24) & 255].join('.');
}

/** An IPv6 address as /proc/net/ipv6_route writes it: 32 hex digits, in order. */
export function hex6(h: string): string {
  return Array.from({ length: 8 }, (_, i) => h.slice(i * 4, i * 4 + 4)).join(':');
}

/** An IPv6 address as /proc/net/tcp6 writes it: four 32-bit words, each little-endian. */
export function hex6Words(a: string): string {
  let out = '';
  for (let i = 0; i < 32; i += 8) for (const j of [6, 4, 2, 0]) out += a.slice(i + j, i + j + 2);
  return hex6(out);
}

const fields = (line: string) => line.trim().split(/\s+/).filter(Boolean);

export function parseRoutes(routeLines: string[], ipv6Lines: string[]): ProbeFacts['routes'] {
  const routes: ProbeFacts['routes'] = [];
  for (const line of routeLines.slice(1)) {
    const f = fields(line);
    if (f.length >= 8) routes.push({ family: 'ipv4', iface: f[0], dest: hex4(f[1]), mask: hex4(f[7]) });
  }
  for (const line of ipv6Lines) {
    const f = fields(line);
    if (f.length >= 10) routes.push({ family: 'ipv6', iface: f[9], dest: hex6(f[0]), mask: String(parseInt(f[1], 16)) });
  }
  return routes;
}

export function parseSockets(lines: string[], proto: string, wantedState: string, decode: (a: string) => string): string[] {
  const out: string[] = [];
  for (const line of lines.slice(1)) {
    const f = fields(line);
    if (f.length >= 4 && f[3] === wantedState) {
      const [addr, port] = f[1].split(':');
      out.push(`${decode(addr)}:${parseInt(port, 16)}/${proto}`);
    }
  }
  return out;
}

const ERRNO_TEXT: [RegExp, string][] = [
  [/Read-only file system/i, 'EROFS'],
  [/Permission denied/i, 'EACCES'],
  [/No such file or directory|nonexistent directory|can't create/i, 'ENOENT'],
  [/Connection refused/i, 'ECONNREFUSED'],
  [/Network is unreachable/i, 'ENETUNREACH'],
  [/No route to host/i, 'EHOSTUNREACH'],
  [/timed out/i, 'timeout'],
];

/** The errno name a shell's or nc's message stands for, or the message itself. */
function errnoOf(text: string): string {
  for (const [re, name] of ERRNO_TEXT) if (re.test(text)) return name;
  return text.trim() === '' ? 'error' : `error:${text.trim().slice(0, 120)}`;
}

/**
 * The facts of the shell probe's stdout, or null when it is not a probe report (it must end
 * with `@@ done`). `missing` lists the tools of the image it needed and did not find.
 */
export function parseShellProbe(stdout: string): ProbeFacts | null {
  const lines = stdout.split('\n');
  if (!lines.some((l) => l === '@@ done')) return null;
  const files = new Map<string, string>();
  const facts: ProbeFacts = {
    net: [],
    interfaces: [],
    routes: [],
    sockets: [],
    nameservers: [],
    writes: {},
    environ: {},
    proc1_environ: 'unreadable:missing',
    docker_sock: {},
    mounts: [],
    // Fail-safe: what the report does not say is taken as the worst case (root, no limits).
    ids: { uid: 0, euid: 0, gid: 0, egid: 0, groups: [] },
    status: {},
    pids: { forked: 0, stopped_by: 'not_run' },
    memory: { allocated: 0, outcome: 'probe_error:not_run', returncode: null },
    missing: [],
  };
  readReport(lines, facts, files);
  readFiles(files, facts);
  return facts;
}

/** The report's tagged lines into `facts`, and the files it dumped into `files`. */
function readReport(lines: string[], facts: ProbeFacts, files: Map<string, string>): void {
  let forkFailure = '';
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    if (line.startsWith('@@ file ')) {
      const body: string[] = [];
      for (i++; i < lines.length && lines[i] !== '@@ end'; i++) body.push(lines[i]);
      files.set(line.slice('@@ file '.length), body.join('\n').replace(/\n$/, '')); // the newline the probe added
      continue;
    }
    const [tag, ...rest] = line.split(' ').slice(1);
    if (!line.startsWith('@@ ')) {
      if (/fork/i.test(line)) forkFailure = line; // the fork loop's shell reports why it stopped
      continue;
    }
    switch (tag) {
      case 'missing':
        facts.missing = rest.filter(Boolean);
        break;
      case 'net': {
        const [target, code, ...message] = rest;
        facts.net.push({ target, result: code === '0' ? 'connected' : errnoOf(message.join(' ')) });
        break;
      }
      case 'iface':
        facts.interfaces.push(rest[0]);
        break;
      case 'write':
        facts.writes[rest[0]] = rest[1] === 'written' ? 'written' : errnoOf(rest.slice(2).join(' '));
        break;
      case 'unreadable':
        if (rest[0] === '/proc/1/environ') facts.proc1_environ = 'unreadable:EACCES';
        break;
      case 'sock':
        facts.docker_sock[rest[0]] = rest[1] === 'yes';
        break;
      case 'alloc':
        if (rest[0] === 'bound') facts.memory.outcome = 'bound';
        else if (rest[0] === 'rc') {
          const rc = Number(rest[1]);
          facts.memory.returncode = rc;
          if (facts.memory.outcome !== 'bound') facts.memory.outcome = `exit:${rc}`;
        } else facts.memory.allocated = Math.max(facts.memory.allocated, Number(rest[0]));
        break;
      case 'forked':
        if (rest[0] === 'bound') facts.pids.stopped_by = 'bound';
        else facts.pids.forked = Math.max(facts.pids.forked, Number(rest[0]));
        break;
    }
  }
  if (facts.pids.stopped_by === 'not_run' && facts.pids.forked > 0) {
    // The subshell died at a failed fork: EAGAIN is what a pids limit gives.
    facts.pids.stopped_by = /Resource temporarily unavailable/i.test(forkFailure) ? 'EAGAIN' : `fork_failed:${forkFailure.slice(0, 120)}`;
  }
}

/** What the dumped files say: routes, sockets, nameservers, environment, mounts, status and ids. */
function readFiles(files: Map<string, string>, facts: ProbeFacts): void {
  const text = (path: string) => (files.get(path) ?? '').split('\n').filter((l) => l !== '');
  facts.interfaces.sort();
  facts.routes = parseRoutes(text('/proc/net/route'), text('/proc/net/ipv6_route'));
  facts.sockets = [
    ...parseSockets(text('/proc/net/tcp'), 'tcp', '0A', hex4),
    ...parseSockets(text('/proc/net/tcp6'), 'tcp', '0A', hex6Words),
    ...parseSockets(text('/proc/net/udp'), 'udp', '07', hex4),
    ...parseSockets(text('/proc/net/udp6'), 'udp', '07', hex6Words),
  ];
  facts.nameservers = text('/etc/resolv.conf')
    .filter((l) => l.startsWith('nameserver') && fields(l).length > 1)
    .map((l) => fields(l)[1]);
  const environ = (path: string) => (files.get(path) ?? '').split('\0').filter(Boolean);
  // The environment the engine gave is process 1's: this shell's own. A child (cat) would also
  // show what the shell exports of its own (PWD, SHLVL); its dump still counts for the secret,
  // which is looked for in the whole output.
  if (files.has('/proc/1/environ')) facts.proc1_environ = environ('/proc/1/environ');
  facts.environ = Object.fromEntries(environ('/proc/1/environ').map((e) => [e.split('=')[0], e.slice(e.indexOf('=') + 1)]));
  facts.mounts = [...new Set(text('/proc/self/mountinfo').map((l) => fields(l)[4]))].filter(Boolean).sort();
  const status = new Map(text('/proc/self/status').map((l) => [l.slice(0, l.indexOf(':')), l.slice(l.indexOf(':') + 1).trim()]));
  facts.status = Object.fromEntries(
    ['NoNewPrivs', 'CapEff', 'CapPrm', 'CapBnd', 'CapAmb', 'Seccomp'].map((k) => [k, status.get(k) ?? null]),
  );
  const ids = (key: string) => fields(status.get(key) ?? '').map(Number);
  const [uid, euid] = ids('Uid');
  const [gid, egid] = ids('Gid');
  facts.ids = { uid: uid ?? 0, euid: euid ?? 0, gid: gid ?? 0, egid: egid ?? 0, groups: ids('Groups') };
}
