/**
 * Small files that must survive a crash whole: written to a synced temporary file and renamed (or
 * linked) into place, never created empty and filled afterwards. The host id of a state folder is
 * one such file, made by whichever worker of the host comes first. A running process group's
 * record is written whole but not synced: only a machine crash can tear it, and that ends its group.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ProcessGroups } from '../sandbox/backends/local';
import { writeFileAtomic } from '../host/files';
import { hostId } from '../worker/index';
import { tempDir } from './helpers/run-dir';

describe('writeFileAtomic', () => {
  it('replaces a file whole and leaves no temporary file', () => {
    const dir = tempDir('atomic');
    const file = join(dir, 'record.json');
    writeFileAtomic(file, 'one');
    writeFileAtomic(file, 'two');
    expect(readFileSync(file, 'utf8')).toBe('two');
    expect(readdirSync(dir)).toEqual(['record.json']);
  });

  it('exclusive: creates a file whole once, and refuses with EEXIST (content kept, no temporary file) when it exists', () => {
    const dir = tempDir('atomic');
    const file = join(dir, 'id');
    writeFileAtomic(file, 'first', { exclusive: true });
    expect(() => writeFileAtomic(file, 'second', { exclusive: true })).toThrow(expect.objectContaining({ code: 'EEXIST' }));
    expect(readFileSync(file, 'utf8')).toBe('first');
    expect(readdirSync(dir)).toEqual(['id']);
  });
});

describe("a host's id", () => {
  it('is made once and kept: a restarted worker is the same host', () => {
    const dir = tempDir('host-id');
    const id = hostId(dir);
    expect(id).toMatch(/^host-[0-9a-f]{12}$/);
    expect(hostId(dir)).toBe(id);
    expect(readFileSync(join(dir, 'host-id'), 'utf8')).toBe(`${id}\n`);
    expect(readdirSync(dir)).toEqual(['host-id']);
  });

  it('is the same for eight workers of one host starting at once, and never read empty', async () => {
    const dir = tempDir('host-id');
    const index = join(__dirname, '..', 'worker', 'index.js');
    // Each process waits for the same moment, then makes or reads the id; a ninth reads the file in a loop meanwhile.
    const at = Date.now() + 5000;
    const maker = `const { hostId } = require(${JSON.stringify(index)}); const at=${at}; while (Date.now() < at) {} process.stdout.write(hostId(${JSON.stringify(dir)}));`;
    const reader = `const fs=require('node:fs'); const f=${JSON.stringify(join(dir, 'host-id'))}; const until=${at} + 1500; let seen=new Set();
      while (Date.now() < until) { try { seen.add(fs.readFileSync(f, 'utf8')); } catch (e) { if (e.code !== 'ENOENT') throw e; } }
      process.stdout.write(JSON.stringify([...seen]));`;
    const run = (script: string) =>
      new Promise<string>((resolve, reject) => {
        const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
        let out = '';
        child.stdout.on('data', (c: Buffer) => (out += c.toString('utf8')));
        child.on('error', reject);
        child.on('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`exit ${code}`))));
      });
    const [seen, ...ids] = await Promise.all([run(reader), ...Array.from({ length: 8 }, () => run(maker))]);
    expect(new Set(ids).size).toBe(1);
    expect(ids[0]).toMatch(/^host-[0-9a-f]{12}$/);
    // Whatever the reader saw, it was the whole id: never an empty or partial file.
    expect((JSON.parse(seen) as string[]).every((s) => s === `${ids[0]}\n`)).toBe(true);
    expect(readdirSync(dir)).toEqual(['host-id']);
  });

  it('refuses, with what to do, a file an earlier version left empty', () => {
    const dir = tempDir('host-id');
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'host-id'), '');
    expect(() => hostId(dir)).toThrow(/holds no host id; if no run is waiting on this host, remove it/);
    expect(existsSync(join(dir, 'host-id'))).toBe(true);
  });
});

describe('process-group records of the local backend', () => {
  it('are written whole, readable by this user only, with no temporary file left beside them', () => {
    const dir = join(tempDir('groups'), 'records');
    const groups = new ProcessGroups(dir);
    groups.add(4242, '0f0e0d0c-0000-4000-8000-000000000001', 'pytest');
    const name = '4242-0f0e0d0c-0000-4000-8000-000000000001.json';
    expect(readdirSync(dir)).toEqual([name]);
    expect(JSON.parse(readFileSync(join(dir, name), 'utf8'))).toMatchObject({ pgid: 4242, command: 'pytest', owner: { pid: process.pid } });
    expect(statSync(join(dir, name)).mode & 0o777).toBe(0o600);
    groups.remove(4242, '0f0e0d0c-0000-4000-8000-000000000001');
    expect(readdirSync(dir)).toEqual([]);
  });

  it("are not synced, so a machine crash can tear one: reaping removes a torn record and goes on, keeping a live owner's", () => {
    const dir = join(tempDir('groups'), 'records');
    const groups = new ProcessGroups(dir);
    groups.add(4243, '0f0e0d0c-0000-4000-8000-000000000002', 'pytest');
    const torn = ['', '{"pgid": 4244, "tok', 'null', '[]', '{"pgid": 4245}', '{"pgid":4246,"token":"t","owner":{},"command":"x"}'];
    torn.forEach((text, i) => writeFileSync(join(dir, `${4250 + i}-0f0e0d0c-0000-4000-8000-00000000001${i}.json`), text));
    expect(readdirSync(dir)).toHaveLength(1 + torn.length);
    expect(groups.reapOrphans()).toEqual([]);
    expect(readdirSync(dir)).toEqual(['4243-0f0e0d0c-0000-4000-8000-000000000002.json']);
  });
});
