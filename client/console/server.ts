/**
 * The approval console: a small web app over the same Signal and Queries as the command line.
 * Runs awaiting approval (a visibility query on AgentStatus), the card of a pending action, and
 * Approve / Reject that send the `approval` Signal with the digests the page displayed and the
 * principal `console:<name>` of the signed-in person.
 *
 * Security: every page needs a session. A session is made only by a POST to /login carrying
 * either the console token, typed into the form, or a one-time code from the link the console
 * printed; the token itself never travels in a URL (a GET of `/login?token=...` signs nobody in).
 * A code works once, within 10 minutes, and only a POST uses it up, so a link prefetcher that
 * GETs it burns nothing. Sessions end after 12 hours idle, 24 hours after sign-in however busy,
 * or on sign-out (all three times are options), and at most 100 are kept (the least recently used
 * goes first). State changes, sign-out included, are POST with the session's CSRF token; cookies
 * are HttpOnly and SameSite=Strict; pages carry a CSP that allows no script and no foreign form
 * target (guards.ts). Only requests naming the console are answered (origin.ts): loopback names on
 * loopback, else the operator's public https address, behind whose TLS the cookies are also Secure.
 * Codes and sessions live in memory (sign-in.ts): a restart signs everyone out.
 *
 * A write whose diff was cut for display is approved here only after this session was sent its
 * whole diff: plain text from the host store, served only while that action is the pending one,
 * and only when its digest is the `diff_ref` the prepare activity put in history and it begins
 * with the cut diff the card showed (whole-diff.ts). Reject needs no such step (approval.ts).
 *
 * The API (`/api/...`, docs/delivery.md) serves each run's event stream (events.ts, from one shared
 * reader per run: feed.ts) and takes actions with idempotency ids (actions.ts), for a signed-in
 * browser or a machine client with one of the operator's API tokens (access.ts). The run page and
 * the list follow the stream with the console's own script, allowed by its hash (live-script.ts).
 */
import type { AddressInfo } from 'node:net';
import type { Client } from '@temporalio/client';
import Fastify from 'fastify';
import { ApiDoor } from './access';
import { actionsRoute, Outcomes } from './actions';
import { approvalRoute } from './approval';
import { eventsRoute } from './events';
import { Feeds } from './feed';
import { acceptForms, Door, guardRequests } from './guards';
import { removeConsoleRecord, writeConsoleRecord } from './record';
import { parsePublicUrl, refusal, type PublicOrigin } from './origin';
import { runPages, signInRoutes } from './routes';
import { Sessions, SignInCodes } from './sign-in';
import { wholeDiffRoute } from './whole-diff';

export interface ConsoleOptions {
  client: Client;
  /** The console's secret: typed into the sign-in form, it makes a session. */
  token: string;
  host: string;
  port: number;
  /**
   * The operator's public `https://` origin of the console (a TLS terminator in front of it).
   * Required off loopback; with it only that Host is answered and cookies are Secure.
   */
  publicUrl?: string | null;
  /** Base address of the Temporal Web UI, when known. */
  webUi: string | null;
  namespace: string;
  /**
   * The state folder whose host store holds whole diffs (actions prepared on this host). Without
   * it, an action whose diff was cut cannot be shown whole, so it cannot be approved here.
   */
  stateDir?: string | null;
  /** How long an approval waits for the run to confirm it (recorded or ignored). */
  confirmMs?: number;
  /** The clock of sessions and sign-in codes, in ms since the epoch; tests inject one to show expiry. */
  now?: () => number;
  /** A session ends after this long without a request (default 12 hours). */
  sessionIdleMs?: number;
  /** A session ends this long after sign-in, however busy (default 24 hours). */
  sessionMaxMs?: number;
  /** A sign-in code is good for this long after it was made (default 10 minutes). */
  codeTtlMs?: number;
  /** The operator's API tokens for machine clients, by name (client/console/token.ts); none: browsers only. */
  apiTokens?: ReadonlyMap<string, string>;
  /** How often a followed run is asked for news (default 100 ms). */
  pollMs?: number;
  /** A stream sends a comment line after this long without a frame (default 5 s). */
  keepAliveMs?: number;
  /** A stream is closed after this long, and its client reconnects (default 10 minutes). */
  streamMaxMs?: number;
  /** Writes `console.json` (where this console listens) into this folder while it serves: the command line finds it there. */
  recordDir?: string | null;
}

export interface RunningConsole {
  /** Where it listens. */
  url: string;
  /** Where browsers reach it: the public origin when one was given, else `url`. */
  publicUrl: string;
  /** A sign-in link with a fresh one-time code, `<publicUrl>/login?code=...`; it never carries the token. */
  signInLink(): string;
  close(): Promise<void>;
}

export const SESSION_IDLE_MS = 12 * 3600_000;
export const SESSION_MAX_MS = 24 * 3600_000;
export const CODE_TTL_MS = 10 * 60_000;
export const MAX_SESSIONS = 100;
const MAX_CODES = 100;
/** Runs followed at once, streams open at once, and action outcomes kept, at most. */
const MAX_FEEDS = 200;
const MAX_STREAMS = 500;
const MAX_OUTCOMES = 10_000;

export async function startConsole(o: ConsoleOptions): Promise<RunningConsole> {
  const publicOrigin = checkedOrigin(o);
  const now = o.now ?? Date.now;
  const sessions = new Sessions(now, o.sessionIdleMs ?? SESSION_IDLE_MS, o.sessionMaxMs ?? SESSION_MAX_MS, MAX_SESSIONS);
  const codes = new SignInCodes(now, o.codeTtlMs ?? CODE_TTL_MS, MAX_CODES);
  const door = new Door(sessions, publicOrigin !== null);
  const app = Fastify({ logger: false, bodyLimit: 16 * 1024 });
  acceptForms(app);
  // The guards before any route: no route is ever answered to a foreign Host or without the headers.
  guardRequests(app, publicOrigin);
  const api = new ApiDoor(door, o.apiTokens ?? new Map());
  const stateDir = o.stateDir ?? null;
  const feeds = new Feeds({ client: o.client, stateDir, pollMs: o.pollMs ?? 100 }, MAX_FEEDS);
  signInRoutes(app, door, codes, o.token);
  runPages(app, door, o.client, { webUi: o.webUi, namespace: o.namespace });
  wholeDiffRoute(app, door, api, o.client, stateDir);
  approvalRoute(app, door, o.client, o.confirmMs ?? 10_000);
  eventsRoute(app, api, o.client, feeds, {
    keepAliveMs: o.keepAliveMs ?? 5000,
    maxMs: o.streamMaxMs ?? 10 * 60_000,
    maxStreams: MAX_STREAMS,
  });
  actionsRoute(app, api, o.client, { stateDir, confirmMs: o.confirmMs ?? 10_000, outcomes: new Outcomes(MAX_OUTCOMES) });

  await app.listen({ host: o.host, port: o.port });
  const address = app.server.address() as AddressInfo;
  const shown = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const url = `http://${shown}:${address.port}`;
  const publicUrl = publicOrigin?.url ?? url;
  const record = o.recordDir ? writeConsoleRecord(o.recordDir, { url, public_url: publicUrl, pid: process.pid }) : null;
  return {
    url,
    publicUrl,
    signInLink: () => `${publicUrl}/login?code=${codes.make()}`,
    close: async () => {
      if (record) removeConsoleRecord(record);
      feeds.close();
      // Open streams hold their connections: closed with the server, their clients reconnect elsewhere.
      app.server.closeAllConnections();
      await app.close();
    },
  };
}

/** The operator's public origin, or null on loopback; throws when the token or the address may not serve. */
function checkedOrigin(o: ConsoleOptions): PublicOrigin | null {
  if (o.token.length < 16) throw new Error('the console token must be at least 16 characters');
  const publicOrigin = o.publicUrl ? parsePublicUrl(o.publicUrl) : null;
  if (typeof publicOrigin === 'string') throw new Error(publicOrigin);
  const refused = refusal(o.host, publicOrigin);
  if (refused !== null) throw new Error(refused);
  return publicOrigin;
}
