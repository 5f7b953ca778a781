/**
 * A host folder tree lent to another user for the life of one sandboxed process, and given back
 * (in a workspace thread: the walk is as long as the tree a process left).
 *
 * Hazards: symlinks are never followed (lchown, no descent), so a link planted by the process
 * cannot redirect a chown onto host files. Giving back runs only after the process is gone, so
 * nothing races it. set-uid/set-gid bits are stripped from regular files on the way back: a file
 * made set-uid by the sandbox user must not become a set-uid root binary on the host. If the
 * worker dies between lend and give-back, the tree stays owned by the other user (the next exec
 * lends it again; ownership is not part of the workspace manifest).
 */
import { chmodSync, lchownSync, lstatSync, readdirSync, type Stats } from 'node:fs';
import { join } from 'node:path';

/** Each entry's owner before the lend: path, uid, gid. */
export type Owners = [string, number, number][];

function walk(path: string, visit: (p: string, st: Stats) => void): void {
  const st = lstatSync(path);
  visit(path, st);
  if (st.isDirectory()) for (const name of readdirSync(path)) walk(join(path, name), visit);
}

/** Hands `root` and everything below it to `uid`:`gid`; returns who owned what, for giveBackTree. */
export function lendTree(root: string, uid: number, gid: number): Owners {
  const owners: Owners = [];
  walk(root, (p, st) => void owners.push([p, st.uid, st.gid]));
  try {
    for (const [p, u, g] of owners) if (u !== uid || g !== gid) lchownSync(p, uid, gid);
  } catch (err) {
    giveBackTree(root, owners); // a half-lent tree is given back before the error surfaces
    throw err;
  }
  return owners;
}

/** Gives `root` back: each entry to its owner before the lend, entries made since to the root's. */
export function giveBackTree(root: string, owners: Owners): void {
  const before = new Map(owners.map(([p, u, g]) => [p, { uid: u, gid: g }]));
  const rootOwner = before.get(root) ?? { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 };
  walk(root, (p, st) => {
    const want = before.get(p) ?? rootOwner;
    if (st.uid !== want.uid || st.gid !== want.gid) lchownSync(p, want.uid, want.gid);
    if (st.isFile() && (st.mode & 0o6000) !== 0) chmodSync(p, st.mode & 0o1777);
  });
}
