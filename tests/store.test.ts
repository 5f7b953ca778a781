/**
 * The host store on a real SQLite file, the bounded views that history carries, and the payload
 * guard that keeps every history payload under its cap.
 */
import { join } from 'node:path';
import { z } from 'zod';
import { deterministicFailure } from '../activities';
import { BackendUnavailableError } from '../sandbox/backends/types';
import { ReplayFileError } from '../models/replay';
import Database from 'better-sqlite3';
import { Store, StoreError } from '../store/store';
import { FragmentWriter, turnFragments } from '../store/fragments';
import { canonicalJson } from '../core/canonical';
import { brief, BRIEF_STRING } from '../core/transcript';
import { MAX_PAYLOAD_BYTES, PayloadSizeGuard } from '../worker/payload-guard';
import { tempDir } from './helpers/run-dir';

describe('the host store', () => {
  const file = () => join(tempDir('store'), 'store.sqlite');

  it('stores a value under the digest of its canonical JSON, once, and keeps it across reopening', () => {
    const path = file();
    const store = new Store(path);
    const a = store.put('result', { b: 1, a: 'x' });
    expect(store.put('result', { a: 'x', b: 1 })).toBe(a);
    expect(a).toBe(
      require('node:crypto')
        .createHash('sha256')
        .update(canonicalJson({ a: 'x', b: 1 }))
        .digest('hex'),
    );
    store.close();
    const again = new Store(path);
    expect(again.get(a)).toEqual({ a: 'x', b: 1 });
    again.close();
  });

  it('fails loudly on a digest it does not hold, never answering with an empty value', () => {
    const store = new Store(file());
    expect(() => store.get('0'.repeat(64))).toThrow(StoreError);
    store.close();
  });

  it('chains transcript entries in order and gives the same head for the same entries', () => {
    const store = new Store(file());
    const d1 = store.put('decision', { kind: 'plan', text: 'p' });
    const d2 = store.put('decision', { kind: 'final', text: 'f' });
    const head1 = store.appendTranscript(null, [{ decision: d1 }, { message: 'steer' }]);
    const head2 = store.appendTranscript(head1, [{ decision: d2 }]);
    expect(store.appendTranscript(null, [{ decision: d1 }, { message: 'steer' }, { decision: d2 }])).toBe(head2);
    expect(store.transcript(head2)).toEqual([{ decision: d1 }, { message: 'steer' }, { decision: d2 }]);
    expect(store.transcript(null)).toEqual([]);
    store.close();
  });

  it('commits the rows of one batch together (one sync): another connection sees all of them or none', () => {
    const path = file();
    const store = new Store(path);
    const other = new Store(path);
    let inside: boolean | null = null;
    const head = store.batch(() => {
      const d = store.put('decision', { kind: 'plan', text: 'p' });
      store.appendTrace('run-a', [{ seq: 1, type: 'run_started', data: {} }]);
      const h = store.appendTranscript(null, [{ decision: d }]);
      inside = other.has(d);
      return h;
    });
    expect(inside).toBe(false);
    expect(other.transcript(head)).toHaveLength(1);
    expect(other.trace('run-a')).toHaveLength(1);
    const lost = canonicalJson({ kind: 'plan', text: 'never stored' });
    expect(() =>
      store.batch(() => {
        store.put('decision', { kind: 'plan', text: 'never stored' });
        throw new Error('the activity failed halfway');
      }),
    ).toThrow('halfway');
    expect(other.has(require('node:crypto').createHash('sha256').update(lost).digest('hex'))).toBe(false);
    store.close();
    other.close();
  });

  it('records trace events by seq, so a retried append changes nothing', () => {
    const store = new Store(file());
    const events = [1, 2, 3].map((seq) => ({ seq, type: 'run_started' as const, data: { seq } }));
    store.appendTrace('run-a', events.slice(0, 2));
    store.appendTrace('run-a', events);
    store.appendTrace('run-b', events.slice(0, 1));
    expect(store.trace('run-a')).toEqual(events);
    expect(store.trace('run-b')).toHaveLength(1);
    store.close();
  });

  it("numbers a turn's fragments from 1 over its streams, reads the rows older builds wrote alike, and gives a reader the newest stream", () => {
    const path = file();
    const store = new Store(path);
    // A row as an older build wrote it: the first fragment of turn 2, stream 1, at idx 0.
    const older = new Database(path);
    older.prepare(`INSERT INTO fragments VALUES (?, ?, ?, ?, ?)`).run('run-a', 2, 0, 1, 'Pla');
    older.close();
    expect(turnFragments(store, 'run-a', 2, 0)).toEqual([{ turn: 2, index: 1, stream: 1, text: 'Pla' }]);
    // The turn asked again: a second stream, whose fragment is the turn's second.
    const writer = new FragmentWriter(store, 'run-a', 2);
    writer.push('The plan');
    writer.flush();
    expect(store.fragmentsAfter('run-a', null)).toEqual([
      { turn: 2, index: 1, stream: 1, text: 'Pla' },
      { turn: 2, index: 2, stream: 2, text: 'The plan' },
    ]);
    expect(store.fragmentsAfter('run-a', { turn: 2, index: 1 })).toEqual([{ turn: 2, index: 2, stream: 2, text: 'The plan' }]);
    expect(turnFragments(store, 'run-a', 2, 0)).toEqual([{ turn: 2, index: 2, stream: 2, text: 'The plan' }]);
    expect(turnFragments(store, 'run-a', 2, 2)).toEqual([]);
    expect(turnFragments(store, 'run-a', 3, 0)).toEqual([]);
    expect(store.nextFragmentStream('run-a', 2)).toBe(3);
    // On disk the rows keep the form every build reads: idx from 0.
    const rows = new Database(path, { readonly: true });
    expect(rows.prepare(`SELECT idx, stream FROM fragments ORDER BY idx`).all()).toEqual([
      { idx: 0, stream: 1 },
      { idx: 1, stream: 2 },
    ]);
    rows.close();
    store.close();
  });
});

describe('failures that would repeat on every attempt', () => {
  it('become non-retryable with their own type; transient ones stay retryable', () => {
    const denied = Object.assign(new Error("EACCES: permission denied, open 'junit.xml'"), { code: 'EACCES' });
    expect(deterministicFailure('executeTool', denied)).toMatchObject({
      type: 'InfrastructureError',
      nonRetryable: true,
      details: ['EACCES'],
    });
    expect(deterministicFailure('verify', new SyntaxError('Unexpected end of JSON input'))).toMatchObject({
      type: 'DataError',
      nonRetryable: true,
    });
    expect(deterministicFailure('decide', new StoreError('nothing is stored under x'))).toMatchObject({
      type: 'DataError',
      nonRetryable: true,
    });
    // Recognised by class, never by name: a zod error is one, an error merely named ZodError is not.
    expect(deterministicFailure('loadRun', z.object({ a: z.string() }).safeParse({ a: 1 }).error)).toMatchObject({
      type: 'DataError',
      nonRetryable: true,
    });
    const impostor = Object.assign(new Error('looks like one'), { name: 'ZodError' });
    expect(deterministicFailure('loadRun', impostor)).toBe(impostor);
    expect(deterministicFailure('loadRun', new ReplayFileError('replay x is invalid'))).toMatchObject({
      type: 'ReplayFileError',
      nonRetryable: true,
    });
    expect(deterministicFailure('executeTool', new BackendUnavailableError('runtime not found: pytest', 'runtime_missing'))).toMatchObject({
      type: 'InfrastructureError',
      nonRetryable: true,
      details: ['runtime_missing'],
    });
    const busy = Object.assign(new Error('database is locked'), { code: 'SQLITE_BUSY' });
    expect(deterministicFailure('persist', busy)).toBe(busy);
  });
});

describe('views carried in history', () => {
  it('keeps short values whole and bounds long strings, long arrays, many fields and deep nesting', () => {
    expect(brief({ a: 'short', n: 3, ok: true, none: null })).toEqual({ a: 'short', n: 3, ok: true, none: null });
    const text = 'x'.repeat(50_000);
    expect(brief(text)).toBe(`${'x'.repeat(BRIEF_STRING)}… [${50_000 - BRIEF_STRING} more characters]`);
    expect(brief(Array.from({ length: 100 }, (_, i) => i))).toEqual([0, 1, 2, 3, 4, 5, 6, 7, '… 92 more']);
    const wide = Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`k${i}`, text]));
    expect(JSON.stringify(brief(wide)).length).toBeLessThan(8 * 1024);
    expect(brief({ a: { b: { c: { d: { e: 1 } } } } })).toEqual({ a: { b: { c: { d: '…' } } } });
  });

  it('refuses to encode a payload over the cap and passes one at the cap', async () => {
    const guard = new PayloadSizeGuard();
    const at = { metadata: {}, data: new Uint8Array(MAX_PAYLOAD_BYTES) };
    await expect(guard.encode([at])).resolves.toEqual([at]);
    await expect(guard.encode([{ metadata: {}, data: new Uint8Array(MAX_PAYLOAD_BYTES + 1) }])).rejects.toThrow(
      /exceeds the 65536-byte cap/,
    );
    await expect(guard.encode([{ metadata: {}, data: new Uint8Array(MAX_PAYLOAD_BYTES + 1) }])).rejects.toMatchObject({
      type: 'PayloadTooLarge',
      nonRetryable: true,
    });
  });
});
