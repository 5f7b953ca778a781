/**
 * The output of a test or acceptance process, capped: the first `cap` bytes of a stream are
 * kept, the rest is drained and dropped, and `truncated` says so. Both backends use it, so their
 * results are byte-identical for the same output (tests/docker.test.ts compares them).
 *
 * A cap can fall inside a multi-byte UTF-8 character. The kept text then ends before that
 * character instead of with a replacement character, so capped text never holds a character the
 * process did not write; a stream that was not cut is decoded as it is.
 */
import { Writable } from 'node:stream';
import type { ExecResult } from './types';

export class CappedOutput {
  private chunks: Buffer[] = [];
  private size = 0;
  /** Bytes were dropped at the cap, or (set by a backend) the stream is not known to be whole. */
  truncated = false;

  constructor(private readonly cap: number) {}

  push(chunk: Buffer): void {
    const room = this.cap - this.size;
    if (chunk.length > room) this.truncated = true;
    if (room > 0) {
      const kept = chunk.subarray(0, Math.min(room, chunk.length));
      this.chunks.push(kept);
      this.size += kept.length;
    }
  }

  text(): string {
    const buf = Buffer.concat(this.chunks);
    return (this.truncated ? utf8Prefix(buf) : buf).toString('utf8');
  }
}

/** A CappedOutput as a writable stream (dockerode demultiplexes into streams); it never applies back-pressure. */
export class CappedSink extends Writable {
  readonly output: CappedOutput;

  constructor(cap: number) {
    super();
    this.output = new CappedOutput(cap);
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, done: (err?: Error | null) => void): void {
    this.output.push(chunk);
    done();
  }
}

/** The longest prefix of `buf` that does not end inside a multi-byte UTF-8 character. */
export function utf8Prefix(buf: Buffer): Buffer {
  let i = buf.length - 1;
  let back = 0;
  while (i >= 0 && back < 4 && (buf[i] & 0xc0) === 0x80) {
    i--;
    back++;
  }
  if (i < 0) return buf;
  const lead = buf[i];
  const need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
  return need > back + 1 ? buf.subarray(0, i) : buf;
}

/** The last `bytes` bytes of `text`, never starting inside a UTF-8 character (a cut one is dropped). */
export function tailBytes(text: string, bytes: number): string {
  const buf = Buffer.from(text);
  return buf.length <= bytes
    ? text
    : buf
        .subarray(buf.length - bytes)
        .toString('utf8')
        .replace(/^\uFFFD+/, '');
}

/** A process's result from its captured output: the exit code only when it was neither stopped nor cut off. */
export function capturedResult(
  exitCode: number | null,
  stop: { timedOut: boolean; cancelled: boolean },
  stdout: CappedOutput,
  stderr: CappedOutput,
): ExecResult {
  return {
    exitCode: stop.timedOut || stop.cancelled ? null : exitCode,
    timedOut: stop.timedOut,
    cancelled: stop.cancelled,
    stdout: stdout.text(),
    stderr: stderr.text(),
    stdoutTruncated: stdout.truncated,
    stderrTruncated: stderr.truncated,
  };
}
