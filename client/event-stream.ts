/**
 * A client of a run's event stream on a console (docs/delivery.md), for the command line's
 * `--follow`: the frames one by one, across reconnections. It sends the console's API token as
 * `Authorization: Bearer` and the id of the last frame it got as `Last-Event-ID`, so a connection
 * that drops loses nothing and repeats nothing.
 *
 * Hazards: the console may go away for good (stopped, restarted elsewhere): after a few failed
 * reconnections the stream is given up (`StreamLost`) and the caller reads the run without it.
 */
import type { Frame } from '../core/delivery';

export interface ConsoleLink {
  /** The console's address (its public one when it has one). */
  url: string;
  /** An API token of the console's operator (the command line's own: `cli`). */
  token: string;
}

export class StreamLost extends Error {
  override name = 'StreamLost';
}

/** Reconnections tried in a row before the stream is given up, and the wait between them. */
const RECONNECTS = 5;
const RECONNECT_MS = 1000;

/** Parses SSE text: complete events out, the unfinished rest back. */
export function parseEvents(buffer: string): { frames: Frame[]; rest: string } {
  const frames: Frame[] = [];
  let rest = buffer.replace(/\r\n?/g, '\n');
  for (let end = rest.indexOf('\n\n'); end >= 0; end = rest.indexOf('\n\n')) {
    const block = rest.slice(0, end);
    rest = rest.slice(end + 2);
    const data = block
      .split('\n')
      .filter((l) => l.startsWith('data:'))
      .map((l) => l.slice(5).replace(/^ /, ''))
      .join('\n');
    if (data !== '') frames.push(JSON.parse(data) as Frame);
  }
  return { frames, rest };
}

/**
 * The frames of run `workflowId` after frame id `after`, of frame versions up to `version`, until
 * its `end` (or a `fault`, which it yields last). Throws StreamLost when the console stays away.
 */
export async function* runFrames(
  link: ConsoleLink,
  workflowId: string,
  o: { after: string; version: number; signal?: AbortSignal },
): AsyncGenerator<Frame> {
  let last = o.after;
  for (let failures = 0; ;) {
    let res: Response;
    try {
      res = await fetch(`${link.url}/api/runs/${encodeURIComponent(workflowId)}/events?v=${o.version}`, {
        headers: { authorization: `Bearer ${link.token}`, 'last-event-id': last, accept: 'text/event-stream' },
        signal: o.signal,
      });
    } catch (err) {
      if (o.signal?.aborted || ++failures > RECONNECTS)
        throw new StreamLost(`the console at ${link.url} does not answer: ${(err as Error).message}`);
      await new Promise((r) => setTimeout(r, RECONNECT_MS));
      continue;
    }
    if (!res.ok || res.body === null) {
      const why = await res.text().catch(() => '');
      throw new StreamLost(`the console at ${link.url} answered ${res.status}: ${why.slice(0, 200)}`);
    }
    failures = 0;
    const decoder = new TextDecoder();
    let buffer = '';
    try {
      for await (const chunk of res.body) {
        const parsed = parseEvents(buffer + decoder.decode(chunk as Uint8Array, { stream: true }));
        buffer = parsed.rest;
        for (const f of parsed.frames) {
          last = f.id;
          yield f;
          if (f.type === 'end' || f.type === 'fault') return;
        }
      }
    } catch (err) {
      if (o.signal?.aborted) throw err;
      // The connection dropped mid-stream: reconnect from the last frame.
    }
  }
}
