/** Classification of provider errors from the SDKs' error types, status codes and headers. */
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { MAX_RETRY_AFTER_MS, type ProviderFailure } from './types';

const RETRYABLE_STATUS = new Set([408, 409, 429, 529]);

type HeaderBag = { get(name: string): string | null } | undefined;

/** The delay the server asked for, in ms: `retry-after-ms`, else `retry-after` (seconds or an HTTP date). */
export function retryAfterMs(headers: HeaderBag, now = Date.now()): number | null {
  const ms = Number(headers?.get('retry-after-ms') ?? NaN);
  if (Number.isFinite(ms) && ms >= 0) return Math.min(ms, MAX_RETRY_AFTER_MS);
  const after = headers?.get('retry-after');
  if (!after) return null;
  const seconds = Number(after);
  const delay = Number.isFinite(seconds) ? seconds * 1000 : Date.parse(after) - now;
  return Number.isFinite(delay) && delay >= 0 ? Math.min(delay, MAX_RETRY_AFTER_MS) : null;
}

function errorCode(error: unknown): string | null {
  const e = error as { code?: unknown; type?: unknown; error?: { code?: unknown; type?: unknown } } | undefined;
  // Anthropic's body is `{type: 'error', error: {type, message}}`: the inner type names the error.
  const code = e?.code ?? e?.error?.code ?? e?.error?.type ?? e?.type;
  return typeof code === 'string' ? code : null;
}

/**
 * A reply stream that broke off before its end: the connection was cut, it stalled longer than the
 * request timeout, or it ended without the protocol's last event. Nothing of it is kept but the
 * fragments already shown; the reply is asked for again.
 */
export class StreamCut extends Error {
  override name = 'StreamCut';
}

/** Error types a stream's `error` event carries that asking again cannot mend (a status-less APIError). */
const PERMANENT_STREAM_ERRORS = new Set(['invalid_request_error', 'authentication_error', 'permission_error', 'insufficient_quota']);

export function classify(err: unknown): ProviderFailure | null {
  if (err instanceof StreamCut)
    return { transient: true, retry_after_ms: null, context_overflow: false, status: null, detail: err.message };
  const isConnection = err instanceof OpenAI.APIConnectionError || err instanceof Anthropic.APIConnectionError;
  if (err instanceof OpenAI.APIUserAbortError || err instanceof Anthropic.APIUserAbortError) return null; // a cancellation, not a provider failure
  if (isConnection) {
    const timeout = err instanceof OpenAI.APIConnectionTimeoutError || err instanceof Anthropic.APIConnectionTimeoutError;
    return {
      transient: true,
      retry_after_ms: null,
      context_overflow: false,
      status: null,
      detail: timeout ? 'the request timed out' : `connection failed: ${(err as Error).message}`,
    };
  }
  if (!(err instanceof OpenAI.APIError) && !(err instanceof Anthropic.APIError)) return null;
  const status = err.status ?? null;
  const headers = err.headers as HeaderBag;
  const code = errorCode(err.error);
  const message = (err.message || '').slice(0, 500);
  const overflow = code === 'context_length_exceeded' || code === 'model_context_window_exceeded' || /prompt is too long/i.test(message);
  // No status: an `error` event inside a stream whose answer began with 200 (Anthropic's overloaded_error).
  let transient = status !== null ? RETRYABLE_STATUS.has(status) || status >= 500 : !PERMANENT_STREAM_ERRORS.has(code ?? '');
  if (code === 'insufficient_quota') transient = false;
  const should = headers?.get('x-should-retry');
  if (should === 'true') transient = true;
  if (should === 'false') transient = false;
  return {
    transient,
    retry_after_ms: retryAfterMs(headers),
    context_overflow: overflow,
    status,
    detail: `${status ?? ''} ${code ?? ''} ${message}`.trim(),
  };
}
