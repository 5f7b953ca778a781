/**
 * Reading a provider's reply stream (both SDKs' `Stream`): each event as it arrives, and every way
 * a stream can end short told apart from its end.
 *
 * Hazards:
 * - The SDKs' own timeout runs only until the response's headers arrive; a stream that then goes
 *   silent would hold the activity (which heartbeats) until its start-to-close timeout. Here a
 *   silence of the request timeout aborts it.
 * - Both SDKs end an aborted stream's iteration without an error, as if it had ended: an abort is
 *   checked after the loop (a cancelled run's, or the silence's).
 * - A connection cut mid-body surfaces as whatever the fetch implementation throws (undici's
 *   `TypeError: terminated`), never as a provider error: it becomes a `StreamCut`.
 */
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { StreamCut } from './errors';
import type { SendOptions } from './types';

export interface ProviderStream<E> extends AsyncIterable<E> {
  controller: AbortController;
}

/**
 * Calls `each` for every event of `stream` until it ends. Throws the provider's own error (an
 * `error` event), a `StreamCut` when it broke off or went silent for `idleMs`, and an abort error
 * when `signal` (the run's cancellation) aborted it.
 */
export async function readStream<E>(
  stream: ProviderStream<E>,
  o: { idleMs: number; signal: AbortSignal },
  each: (event: E) => void,
): Promise<void> {
  let stalled = false;
  const stall = () => {
    stalled = true;
    stream.controller.abort();
  };
  let timer = setTimeout(stall, o.idleMs);
  try {
    for await (const event of stream) {
      clearTimeout(timer);
      timer = setTimeout(stall, o.idleMs);
      each(event);
    }
  } catch (err) {
    if (o.signal.aborted || err instanceof OpenAI.APIError || err instanceof Anthropic.APIError) throw err;
    throw new StreamCut(`the reply stream broke off: ${(err as Error).message}`);
  } finally {
    clearTimeout(timer);
  }
  if (o.signal.aborted) throw new Error('the model request was aborted');
  if (stalled) throw new StreamCut(`the reply stream sent nothing for ${Math.round(o.idleMs / 1000)} s`);
}

/** A reply put back together from its stream's events: each event's text for the fragments, then the whole response. */
export interface Assembly<E> {
  /** Adds one event; returns the reply text it adds ('' when none). */
  add(event: E): string;
  /** The response the same request without streaming returns; a `StreamCut` when the stream ended short. */
  response(): unknown;
}

/** The stream read into `assembly`, its text passed to `onText` as it arrives; resolves to the whole response. */
export async function streamedReply<E>(stream: ProviderStream<E>, assembly: Assembly<E>, options: SendOptions): Promise<unknown> {
  await readStream(stream, { idleMs: options.timeoutMs, signal: options.signal }, (event) => {
    const text = assembly.add(event);
    if (text !== '') options.onText?.(text);
  });
  return assembly.response();
}
