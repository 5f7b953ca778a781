/** What a probe reports (probe.py directly; probe.sh through probe-shell.ts), the facts isolation.ts judges. */
export interface ProbeFacts {
  net: { target: string; result: string }[];
  interfaces: string[];
  routes: { family: 'ipv4' | 'ipv6'; iface: string; dest: string; mask: string }[];
  /** Listening TCP and bound UDP sockets of the sandbox's network namespace, `addr:port/proto`. */
  sockets: string[];
  nameservers: string[];
  writes: Record<string, string>;
  environ: Record<string, string>;
  proc1_environ: string[] | string;
  docker_sock: Record<string, boolean>;
  mounts: string[];
  ids: { uid: number; euid: number; gid: number; egid: number; groups: number[] };
  status: Record<string, string | null>;
  pids: { forked: number; stopped_by: string };
  memory: { allocated: number; outcome: string; returncode: number | null };
  /** The shell probe only: tools of the image it needed and did not find (what it could not measure). */
  missing?: string[];
}
