/**
 * A TLS terminator in front of a plaintext Temporal frontend, as a cluster's gateway would be:
 * HTTP/2 over TLS (ALPN h2) with client certificates required, each gRPC request checked for
 * `authorization: Bearer <key>` and forwarded without it to the dev server's plaintext port.
 * A request without the key gets gRPC status 16 (UNAUTHENTICATED) and is not forwarded.
 *
 * The certificates are made here with the `openssl` command of this machine: one authority for
 * the server, one for clients, and a stranger authority a client must not trust.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import {
  connect,
  constants,
  createSecureServer,
  type ClientHttp2Session,
  type Http2SecureServer,
  type Http2Stream,
  type IncomingHttpHeaders,
  type OutgoingHttpHeaders,
  type ServerHttp2Stream,
} from 'node:http2';
import { join } from 'node:path';

export interface TestPki {
  dir: string;
  /** The authority that signed the server's certificate: what a client must trust. */
  caCert: string;
  /** Another authority that signed nothing the server shows. */
  strangerCaCert: string;
  serverCert: string;
  serverKey: string;
  /** The client's certificate and key, signed by the client authority the server trusts. */
  clientCert: string;
  clientKey: string;
  clientCaCert: string;
}

function openssl(dir: string, args: string[]): void {
  execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
}

function authority(dir: string, name: string): void {
  openssl(dir, [
    'req',
    '-x509',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:P-256',
    '-nodes',
    '-days',
    '2',
    '-keyout',
    `${name}.key`,
    '-out',
    `${name}.crt`,
    '-subj',
    `/CN=${name}`,
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign,cRLSign',
  ]);
}

function leaf(dir: string, name: string, ca: string, extensions: string): void {
  openssl(dir, [
    'req',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:P-256',
    '-nodes',
    '-keyout',
    `${name}.key`,
    '-out',
    `${name}.csr`,
    '-subj',
    `/CN=${name}`,
  ]);
  writeFileSync(join(dir, `${name}.ext`), extensions);
  openssl(dir, [
    'x509',
    '-req',
    '-in',
    `${name}.csr`,
    '-CA',
    `${ca}.crt`,
    '-CAkey',
    `${ca}.key`,
    '-CAcreateserial',
    '-days',
    '2',
    '-out',
    `${name}.crt`,
    '-extfile',
    `${name}.ext`,
  ]);
}

/** Authorities, a server certificate for `localhost` and 127.0.0.1, and a client certificate, in `dir`. */
export function makePki(dir: string): TestPki {
  authority(dir, 'test-ca');
  authority(dir, 'stranger-ca');
  authority(dir, 'client-ca');
  leaf(
    dir,
    'server',
    'test-ca',
    'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n',
  );
  leaf(dir, 'client', 'client-ca', 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n');
  const path = (name: string) => join(dir, name);
  return {
    dir,
    caCert: path('test-ca.crt'),
    strangerCaCert: path('stranger-ca.crt'),
    serverCert: path('server.crt'),
    serverKey: path('server.key'),
    clientCert: path('client.crt'),
    clientKey: path('client.key'),
    clientCaCert: path('client-ca.crt'),
  };
}

export interface TlsTerminator {
  /** `127.0.0.1:<port>`: where clients connect with TLS. */
  address: string;
  port: number;
  /** Requests forwarded, and requests refused for a missing or wrong key. */
  forwarded: number;
  refused: number;
  /** TLS handshakes that failed (an untrusted or missing client certificate, a client that does not trust us). */
  handshakeFailures: number;
  close(): Promise<void>;
}

const HOP = new Set([':method', ':path', ':scheme', ':authority', 'authorization']);

/** Starts the terminator on a free port of 127.0.0.1, forwarding to the plaintext `upstream` (`host:port`). */
export async function startTlsTerminator(o: { upstream: string; pki: TestPki; apiKey: string }): Promise<TlsTerminator> {
  let upstream: ClientHttp2Session | null = null;
  const session = (): ClientHttp2Session => {
    if (upstream === null || upstream.closed || upstream.destroyed) {
      upstream = connect(`http://${o.upstream}`);
      upstream.on('error', () => undefined); // each stream reports its own failure
    }
    return upstream;
  };
  const server: Http2SecureServer = createSecureServer({
    key: readFileSync(o.pki.serverKey),
    cert: readFileSync(o.pki.serverCert),
    ca: readFileSync(o.pki.clientCaCert),
    requestCert: true,
    rejectUnauthorized: true,
    allowHTTP1: false,
  });
  const state: TlsTerminator = {
    address: '',
    port: 0,
    forwarded: 0,
    refused: 0,
    handshakeFailures: 0,
    close: async () => {
      upstream?.close();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  const open = new Set<Http2Stream>();
  const sessions = new Set<{ destroy(): void }>();
  server.on('session', (s) => {
    sessions.add(s);
    s.on('close', () => sessions.delete(s));
  });
  server.on('tlsClientError', () => state.handshakeFailures++);
  server.on('stream', (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => {
    open.add(stream);
    stream.on('close', () => open.delete(stream));
    stream.on('error', () => undefined);
    if (headers.authorization !== `Bearer ${o.apiKey}`) {
      state.refused++;
      stream.respond(
        { ':status': 200, 'content-type': 'application/grpc', 'grpc-status': '16', 'grpc-message': 'missing or wrong API key' },
        { endStream: true },
      );
      return;
    }
    state.forwarded++;
    const forward: OutgoingHttpHeaders = { ':method': headers[':method'], ':path': headers[':path'] };
    for (const [name, value] of Object.entries(headers)) if (!HOP.has(name) && value !== undefined) forward[name] = value;
    const up = session().request(forward);
    let trailers: OutgoingHttpHeaders = { 'grpc-status': '0' };
    up.on('response', (response) => {
      const { ':status': status, ...rest } = response;
      if (response['grpc-status'] !== undefined) {
        // Trailers-only: an answer that is all status (an error, usually).
        stream.respond({ ':status': status, ...rest }, { endStream: true });
        up.resume();
        return;
      }
      stream.respond({ ':status': status, ...rest }, { waitForTrailers: true });
      up.pipe(stream);
    });
    up.on('trailers', (t) => {
      trailers = { ...t };
    });
    stream.on('wantTrailers', () => stream.sendTrailers(trailers));
    up.on('error', () => stream.close(constants.NGHTTP2_INTERNAL_ERROR));
    stream.on('aborted', () => up.close(constants.NGHTTP2_CANCEL));
    stream.pipe(up);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  state.port = (server.address() as { port: number }).port;
  state.address = `127.0.0.1:${state.port}`;
  const close = state.close;
  state.close = async () => {
    for (const s of open) s.close(constants.NGHTTP2_CANCEL);
    for (const s of sessions) s.destroy();
    await close();
  };
  return state;
}
