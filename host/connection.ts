/**
 * How the worker and every command reach Temporal: like the `temporal` CLI, through
 * `@temporalio/envconfig`. The profile named by TEMPORAL_PROFILE (else `default`) of the config
 * file (TEMPORAL_CONFIG_FILE, else `~/.config/temporalio/temporal.toml`), with the TEMPORAL_*
 * variables over it: address, namespace, API key, TLS (CA, client certificate, server name) and
 * gRPC metadata.
 *
 * The embedded default applies exactly when that gives no address: then the caller starts or
 * reuses the local dev server. A profile named but missing, an unreadable file, or an API key or
 * TLS settings without an address are errors, never a silent fallback to the embedded server.
 *
 * Every failure is one `ConnectionError` line saying which: the configuration, an address that
 * does not answer, TLS (the server's certificate, its name, the client certificate), or the
 * server refusing the request (a wrong API key). The SDK's transport errors are text only, so a
 * failed connection is diagnosed again with node:net and node:tls, whose errors carry codes.
 *
 * Hazard: the API key is a secret. It goes only into the connection's options; no message, log
 * line or record holds it (SDK error text is scrubbed of it and of every metadata value).
 */
import { existsSync } from 'node:fs';
import { connect as tcpConnect, isIP } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import type { TLSConfig } from '@temporalio/common/lib/internal-non-workflow';
import {
  loadClientConfig,
  loadClientConfigProfile,
  toClientOptions,
  type ClientConfig,
  type ClientConfigProfile,
  type ConfigDataSource,
} from '@temporalio/envconfig';
import { Metadata, status, type Interceptor } from '@grpc/grpc-js';
import {
  Connection,
  defaultGrpcRetryOptions,
  makeGrpcRetryInterceptor,
  type ConnectionOptions,
  type ConnectionPlugin,
} from '@temporalio/client';
import { NativeConnection } from '@temporalio/worker';
import type { Settings } from './settings';

/** The `temporal` CLI's connection variables, as read once from the environment (host/settings.ts). */
export type TemporalSettings = Pick<
  Settings,
  'temporalAddress' | 'namespace' | 'temporalProfile' | 'temporalConfigFile' | 'temporalApiKey' | 'temporalTls' | 'temporalGrpcMeta'
>;

export type ConnectionFault = 'config' | 'unreachable' | 'tls' | 'refused';

/** Why no connection could be made, in one line; the command line and the worker exit 2 with it. */
export class ConnectionError extends Error {
  override name = 'ConnectionError';
  constructor(
    readonly fault: ConnectionFault,
    message: string,
  ) {
    super(message);
  }
}

export interface TemporalTarget {
  /** Null: the embedded default (no address configured anywhere). */
  address: string | null;
  namespace: string;
  /** Where the settings came from, for messages (never the key). */
  origin: string;
  /** TLS, API key and metadata for `NativeConnection.connect` (empty for the embedded default). */
  options: { tls?: TLSConfig | boolean; apiKey?: string; metadata?: Record<string, string> };
}

const firstLine = (text: string) => text.split('\n')[0].slice(0, 400);

/** The environment envconfig sees: the variables given, nothing else of this process's. */
function envconfigEnv(t: TemporalSettings): Record<string, string> {
  const env: Record<string, string> = { ...t.temporalTls, ...t.temporalGrpcMeta };
  if (t.temporalAddress !== null) env.TEMPORAL_ADDRESS = t.temporalAddress;
  if (t.namespace !== null) env.TEMPORAL_NAMESPACE = t.namespace;
  if (t.temporalApiKey !== null) env.TEMPORAL_API_KEY = t.temporalApiKey;
  return env;
}

function readConfigFile(path: string): ClientConfig {
  try {
    return loadClientConfig({ configSource: { path } });
  } catch (err) {
    // envconfig 1.24 fails on a file without any [profile.*] table: such a file holds no profile.
    if (err instanceof TypeError) return { profiles: {} };
    throw new ConnectionError('config', `cannot read the Temporal config file ${path}: ${firstLine((err as Error).message)}`);
  }
}

/** Resolves where to connect; throws a ConnectionError for a configuration that cannot work. */
export function resolveTarget(t: TemporalSettings): TemporalTarget {
  const config = t.temporalConfigFile;
  const file = config !== null && existsSync(config.path) ? config.path : null;
  if (config?.explicit && file === null)
    throw new ConnectionError('config', `TEMPORAL_CONFIG_FILE names ${config.path}, which does not exist`);
  const name = t.temporalProfile ?? 'default';
  const profiles = file === null ? {} : readConfigFile(file).profiles;
  if (t.temporalProfile !== null && !(name in profiles)) {
    const where =
      file === null
        ? 'there is no Temporal config file (TEMPORAL_CONFIG_FILE, or ~/.config/temporalio/temporal.toml)'
        : `${file} has ${
            Object.keys(profiles).length
              ? `only ${Object.keys(profiles)
                  .sort()
                  .map((p) => `'${p}'`)
                  .join(', ')}`
              : 'no profile'
          }`;
    throw new ConnectionError('config', `unknown Temporal profile '${name}' (TEMPORAL_PROFILE): ${where}`);
  }
  const fromFile = file !== null && name in profiles;
  let profile: ClientConfigProfile;
  try {
    profile = loadClientConfigProfile({
      profile: name,
      configSource: fromFile ? { path: file } : undefined,
      disableFile: !fromFile,
      overrideEnvVars: envconfigEnv(t),
    });
  } catch (err) {
    throw new ConnectionError('config', `profile '${name}' of ${file}: ${firstLine((err as Error).message)}`);
  }
  const origin =
    [fromFile ? `profile '${name}' of ${file}` : null, t.temporalAddress !== null ? 'TEMPORAL_ADDRESS' : null]
      .filter(Boolean)
      .join(' and ') || 'TEMPORAL_* variables';
  for (const [field, source] of Object.entries({
    client_cert: profile.tls?.clientCert,
    client_key: profile.tls?.clientKey,
    server_ca_cert: profile.tls?.serverCACert,
  }) as [string, ConfigDataSource | undefined][]) {
    if (source !== undefined && 'path' in source && !existsSync(source.path))
      throw new ConnectionError('config', `the TLS file ${source.path} (${field}, from ${origin}) does not exist`);
  }
  let connect;
  try {
    connect = toClientOptions(profile);
  } catch (err) {
    throw new ConnectionError('config', `TLS settings from ${origin}: ${firstLine((err as Error).message)}`);
  }
  const { address, apiKey, tls, metadata } = connect.connectionOptions;
  const namespace = connect.namespace ?? 'default';
  if (address === undefined) {
    if (apiKey !== undefined || (tls !== undefined && tls !== false)) {
      const what = apiKey !== undefined ? 'an API key' : 'TLS settings';
      throw new ConnectionError(
        'config',
        `${what} but no address (from ${origin}): set the address (TEMPORAL_ADDRESS or the profile's address), or remove ${apiKey !== undefined ? 'the key' : 'them'} to use the embedded dev server`,
      );
    }
    return { address: null, namespace, origin: 'the embedded default (no address in TEMPORAL_ADDRESS or a profile)', options: {} };
  }
  return {
    address,
    namespace,
    origin,
    options: {
      ...(tls !== undefined && tls !== null ? { tls } : {}),
      ...(apiKey !== undefined ? { apiKey } : {}),
      ...(metadata ? { metadata: metadata as Record<string, string> } : {}),
    },
  };
}

/** A connection to `address` with the target's options; a failure is a ConnectionError saying which. */
export async function connectTemporal(address: string, target: TemporalTarget): Promise<NativeConnection> {
  try {
    return await NativeConnection.connect({ address, ...target.options });
  } catch (err) {
    throw await explain(address, target, err);
  }
}

/** Secrets of a target that no message may hold: the key and every metadata value. */
function scrub(text: string, target: TemporalTarget): string {
  const secrets = [target.options.apiKey, ...Object.values(target.options.metadata ?? {})].filter(
    (s): s is string => typeof s === 'string' && s.length >= 4,
  );
  return secrets.reduce((out, s) => out.split(s).join('[redacted]'), text);
}

async function explain(address: string, target: TemporalTarget, err: unknown): Promise<ConnectionError> {
  const at = `Temporal at ${address} (settings from ${target.origin})`;
  const found = await diagnose(address, target.options.tls);
  if (found?.fault === 'unreachable') return new ConnectionError('unreachable', `cannot reach ${at}: ${found.detail}`);
  if (found?.fault === 'tls') return new ConnectionError('tls', `TLS with ${at} failed: ${found.detail}`);
  // The transport works: the server itself refused (an API key it does not accept, a missing namespace...).
  return new ConnectionError(
    'refused',
    `${at} refused the connection: ${scrub(firstLine(err instanceof Error ? err.message : String(err)), target)}`,
  );
}

/** TLS errors of node:tls by code: the server's certificate is not trusted. */
const UNTRUSTED = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'CERT_UNTRUSTED',
  'CERT_SIGNATURE_FAILURE',
]);
const PLAINTEXT = new Set(['ERR_SSL_WRONG_VERSION_NUMBER', 'ERR_SSL_PACKET_LENGTH_TOO_LONG', 'EPROTO', 'ECONNRESET']);

function splitAddress(address: string): { host: string; port: number } {
  const m = /^\[?([^\]]+?)\]?:(\d+)$/.exec(address);
  return m ? { host: m[1], port: Number(m[2]) } : { host: address, port: 7233 };
}

/** What a plain TCP connection and a TLS handshake with the same settings say, by error code; null when both work. */
async function diagnose(
  address: string,
  tls: TemporalTarget['options']['tls'],
): Promise<{ fault: 'unreachable' | 'tls'; detail: string } | null> {
  const { host, port } = splitAddress(address);
  const tcp = await new Promise<string | null>((resolve) => {
    const socket = tcpConnect({ host, port });
    socket.setTimeout(5000, () => {
      socket.destroy();
      resolve('no answer within 5 s (ETIMEDOUT)');
    });
    socket.once('connect', () => {
      socket.destroy();
      resolve(null);
    });
    socket.once('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
  });
  if (tcp !== null) return { fault: 'unreachable', detail: tcp };
  const on = tls !== undefined && tls !== false;
  const cfg = typeof tls === 'object' ? tls : {};
  const servername = cfg.serverNameOverride ?? (isIP(host) ? undefined : host);
  const handshake = await new Promise<{ secured: boolean; code: string | null }>((resolve) => {
    let secured = false;
    const socket = tlsConnect({
      host,
      port,
      servername,
      ca: on && cfg.serverRootCACertificate ? Buffer.from(cfg.serverRootCACertificate) : undefined,
      cert: on && cfg.clientCertPair ? Buffer.from(cfg.clientCertPair.crt) : undefined,
      key: on && cfg.clientCertPair ? Buffer.from(cfg.clientCertPair.key) : undefined,
      ALPNProtocols: ['h2'],
      rejectUnauthorized: on,
    });
    const done = (code: string | null) => {
      clearTimeout(timer);
      socket.destroy();
      resolve({ secured, code });
    };
    const timer = setTimeout(() => done(secured ? null : 'ETIMEDOUT'), 5000);
    socket.once('secureConnect', () => {
      secured = true;
      // A TLS 1.3 server refuses a client certificate only after the client's handshake is done.
      setTimeout(() => done(null), 500);
    });
    socket.once('error', (e: NodeJS.ErrnoException) => done(e.code ?? e.message));
  });
  if (!on)
    return handshake.secured
      ? { fault: 'tls', detail: 'the server speaks TLS but this connection has TLS off (set tls in the profile, or TEMPORAL_TLS=true)' }
      : null;
  const code = handshake.code;
  if (code === null) return null;
  if (UNTRUSTED.has(code))
    return {
      fault: 'tls',
      detail: `the server's certificate is not signed by a certificate authority this connection trusts (${code}); check the CA (server_ca_cert_path / TEMPORAL_TLS_SERVER_CA_CERT_PATH)`,
    };
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID')
    return {
      fault: 'tls',
      detail: `the server's certificate is not valid for the name ${servername ?? host} (${code}); check server_name / TEMPORAL_TLS_SERVER_NAME`,
    };
  if (code === 'CERT_HAS_EXPIRED' || code === 'CERT_NOT_YET_VALID')
    return { fault: 'tls', detail: `the server's certificate is not valid now (${code})` };
  if (handshake.secured || code.includes('ALERT'))
    return {
      fault: 'tls',
      detail: `the server refused this connection's client certificate (${code}); check client_cert_path and client_key_path (TEMPORAL_TLS_CLIENT_CERT_PATH / _KEY_PATH)`,
    };
  if (PLAINTEXT.has(code))
    return {
      fault: 'tls',
      detail: `the server does not speak TLS (${code}); TLS is on because of ${typeof tls === 'object' ? 'the TLS settings' : 'an API key'} (set tls.disabled = true for a plaintext server)`,
    };
  return { fault: 'tls', detail: `the TLS handshake failed (${code})` };
}

/**
 * A connection of the SDK's gRPC client (`Connection`, not the worker's native one), with the
 * SDK's retry of a failed call (UNAVAILABLE and the like) made safe to close under. That retry
 * runs from a timer, and a retry that found its connection closed threw "Channel has been shut
 * down" from the timer: an uncaught exception that ended the process, and its caller never
 * answered. Here such a retry ends the call with CANCELLED instead, so its caller's promise
 * rejects and nothing else happens.
 */
export function connectClient(options: ConnectionOptions): Promise<Connection> {
  return Connection.connect({ ...options, plugins: [CLOSE_SAFE_CALLS, ...(options.plugins ?? [])] });
}

/** The same, for connections the SDK makes itself (a `TestWorkflowEnvironment`'s): pass it in `plugins`. */
export const CLOSE_SAFE_CALLS: ConnectionPlugin = {
  name: 'close-safe-calls',
  configureConnection: (options) => ({ ...options, interceptors: [closeSafeRetry(), ...(options.interceptors ?? [])] }),
};

function closeSafeRetry(): Interceptor {
  const retry = makeGrpcRetryInterceptor(defaultGrpcRetryOptions());
  return (options, nextCall) =>
    retry(options, (opts) => {
      try {
        return nextCall(opts);
      } catch (err) {
        return endedCall(firstLine((err as Error).message));
      }
    });
}

/**
 * A call that was never made: it answers CANCELLED with `details` as soon as it starts, as a unary
 * call of grpc-js ends without a response: no message (null) first, then the status. The SDK's
 * retry takes the status to its caller through what the message brought, so a status alone threw
 * from this call's first attempt (a call made on a connection already closed).
 */
function endedCall(details: string): ReturnType<Parameters<Interceptor>[1]> {
  return {
    start: (_metadata, listener) => {
      setImmediate(() => {
        listener?.onReceiveMessage?.(null);
        listener?.onReceiveStatus?.({ code: status.CANCELLED, details, metadata: new Metadata() });
      });
    },
    cancelWithStatus: () => undefined,
    getPeer: () => '',
    sendMessageWithContext: () => undefined,
    sendMessage: () => undefined,
    startRead: () => undefined,
    halfClose: () => undefined,
    getAuthContext: () => null,
  };
}
