/**
 * Workspace work off the worker's event loop. Whatever takes time in proportion to what a
 * repository or a test process chose (walking and digesting a tree, copying it, undoing what a
 * test left, writing an imported tree) runs in a worker thread of this process, so heartbeats,
 * Queries and every other run go on meanwhile. The operations are the functions of
 * `thread-ops.ts`, called by name with arguments that structured clone carries.
 *
 * The pool: threads are made when a call finds none idle (at most `MAX_THREADS`), and a thread
 * idle for a minute ends. A workspace's calls go to the thread that served it last when that one
 * is idle, so its manifest cache (workspace/manifest.ts) is warm; any other thread gives the
 * same answers, the cache being checked against every file's stat.
 *
 * Hazards:
 * - Each call has a time limit; past it the thread is terminated (a call blocked in a system call
 *   ends when that call returns) and the call fails. The operations are written so that one cut
 *   off halfway is finished or started over by the next (undo's record, prepared.json last).
 * - Errors cross the boundary by name: the classes callers tell apart (a full disk, a Temporal
 *   failure, a refusal of the workspace, a tree over the limits) are made again on this side with
 *   their fields.
 * - Threads are unref'd: an idle pool never keeps a process alive.
 */
import { Worker } from 'node:worker_threads';
import { join } from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import { DiskFullError } from '../host/disk';
import { GitError, type GitErrorKind } from './git';
import type { OPS } from './thread-ops';

type Ops = typeof OPS;
export type OpName = keyof Ops;
type Result<K extends OpName> = Awaited<ReturnType<Ops[K]>>;

const MAX_THREADS = 4;
const IDLE_EXIT_MS = 60_000;
/** A call's time limit unless it says otherwise: far past any honest tree the limits allow. */
export const DEFAULT_CALL_MS = 10 * 60_000;

export interface CallOptions {
  /** The workspace (or other folder) the call works on: it goes to that folder's last thread. */
  key?: string;
  timeoutMs?: number;
  /** Called every second while the call runs (an activity's heartbeat). */
  onProgress?: () => void;
  /** Buffers whose memory moves to the thread instead of being copied. */
  transfer?: ArrayBuffer[];
}

/** An error as it crosses from the thread: its class name and the fields that make it again. */
export interface WireError {
  name: string;
  message: string;
  stack?: string;
  fields: Record<string, unknown>;
}

/** Serializes an error of the thread (thread-main.ts). */
export function toWire(err: unknown): WireError {
  const e = (err instanceof Error ? err : new Error(String(err))) as Error & Record<string, unknown>;
  const fields: Record<string, unknown> = {};
  for (const key of ['code', 'errno', 'syscall', 'path', 'owner', 'place', 'type', 'nonRetryable', 'details', 'kind']) {
    if (e[key] !== undefined) fields[key] = e[key];
  }
  return { name: e.name, message: e.message, stack: e.stack, fields };
}

/** Classes a caller tells apart, made again from their wire form; the rest are plain errors with the same fields. */
const rebuilders: Record<string, (w: WireError) => Error> = {
  DiskFullError: (w) => new DiskFullError(w.fields.owner as never, w.fields.place as string, w.fields.code as string),
  GitError: (w) => new GitError(w.fields.kind as GitErrorKind, w.message),
  ApplicationFailure: (w) =>
    ApplicationFailure.create({
      type: w.fields.type as string,
      message: w.message,
      nonRetryable: w.fields.nonRetryable === true,
      ...(Array.isArray(w.fields.details) ? { details: w.fields.details } : {}),
    }),
};

export function fromWire(w: WireError): Error {
  const make = rebuilders[w.name];
  const err = make ? make(w) : Object.assign(new Error(w.message), { name: w.name }, w.fields);
  if (w.stack) err.stack = w.stack;
  return err;
}

export class WorkspaceTimeout extends Error {
  override name = 'WorkspaceTimeout';
}

interface Pending {
  resolve: (value: unknown) => void;
  reject: (err: Error) => void;
}

class PoolThread {
  readonly worker: Worker;
  busy = 0;
  private nextId = 0;
  private readonly pending = new Map<number, Pending>();
  private idleTimer: NodeJS.Timeout | undefined;
  dead = false;

  constructor(private readonly onExit: (t: PoolThread) => void) {
    this.worker = new Worker(join(__dirname, 'thread-main.js'));
    this.worker.on('message', (m: { id: number; ok: boolean; value?: unknown; error?: WireError }) => {
      const p = this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id);
      this.done();
      if (m.ok) p.resolve(m.value);
      else p.reject(fromWire(m.error!));
    });
    const fail = (err: Error) => {
      this.dead = true;
      for (const p of this.pending.values()) p.reject(err);
      this.pending.clear();
      clearTimeout(this.idleTimer);
      this.onExit(this);
    };
    this.worker.on('error', (err) => fail(err));
    this.worker.on('exit', (code) => fail(new Error(`the workspace thread ended (exit ${code})`)));
    // After the listeners: adding a 'message' listener refs the thread's port again.
    this.worker.unref();
  }

  call(op: string, args: unknown[], transfer: ArrayBuffer[]): Promise<unknown> {
    clearTimeout(this.idleTimer);
    this.busy++;
    const id = ++this.nextId;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ id, op, args }, transfer);
    });
  }

  private done(): void {
    this.busy--;
    if (this.busy === 0) {
      this.idleTimer = setTimeout(() => void this.worker.terminate(), IDLE_EXIT_MS);
      this.idleTimer.unref();
    }
  }

  kill(): void {
    void this.worker.terminate();
  }
}

const threads: PoolThread[] = [];
const home = new Map<string, PoolThread>();
const HOMES = 1024;

function pick(key: string | undefined): PoolThread {
  const last = key === undefined ? undefined : home.get(key);
  let chosen = last && !last.dead && last.busy === 0 ? last : threads.find((t) => t.busy === 0);
  if (!chosen && threads.length < MAX_THREADS) {
    chosen = new PoolThread((t) => {
      const at = threads.indexOf(t);
      if (at >= 0) threads.splice(at, 1);
    });
    threads.push(chosen);
  }
  // All busy: the least loaded one queues it.
  chosen ??= threads.reduce((a, b) => (b.busy < a.busy ? b : a));
  if (key !== undefined) {
    home.delete(key);
    home.set(key, chosen);
    if (home.size > HOMES) home.delete(home.keys().next().value!);
  }
  return chosen;
}

/** Runs operation `op` of thread-ops.ts in a workspace thread. */
export async function offThread<K extends OpName>(op: K, args: Parameters<Ops[K]>, o: CallOptions = {}): Promise<Result<K>> {
  const thread = pick(o.key);
  const timeoutMs = o.timeoutMs ?? DEFAULT_CALL_MS;
  let timer: NodeJS.Timeout | undefined;
  let progress: NodeJS.Timeout | undefined;
  try {
    const timedOut = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        thread.kill();
        reject(new WorkspaceTimeout(`${op} on the workspace took more than ${timeoutMs / 1000} s`));
      }, timeoutMs);
    });
    if (o.onProgress) progress = setInterval(o.onProgress, 1000);
    return (await Promise.race([thread.call(op, args, o.transfer ?? []), timedOut])) as Result<K>;
  } finally {
    clearTimeout(timer);
    clearInterval(progress);
  }
}
