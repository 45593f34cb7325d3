/**
 * One port for HTTP and the /ws WebSocket. It binds before the services exist (a port-0 server must
 * know its port to sign its descriptor); until serve() it answers 503 and refuses upgrades.
 */
import type { Server } from 'node:http';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { AppContext } from '../context.js';
import type { HttpHandler } from './http.js';
import { createHttpHandler } from './http.js';
import { WsGateway } from './ws.js';

export class Transport {
  private readonly server: Server;
  private gateway: WsGateway | null = null;
  private http: HttpHandler | null = null;
  private closing = false;

  constructor() {
    this.server = createServer((req, res) => {
      // A request still running when close() began would otherwise leave its keep-alive connection
      // open after the answer, holding the shutdown until the client's idle timeout.
      res.once('finish', () => this.closing && this.server.closeIdleConnections());
      if (this.http) return this.http(req, res);
      res.writeHead(503, { 'content-type': 'application/json; charset=utf-8', 'retry-after': '1' });
      res.end(JSON.stringify({ error: 'starting' }));
    });
    this.server.on('upgrade', (req, socket, head) => {
      const path = new URL(req.url ?? '/', 'http://localhost').pathname;
      if (path !== '/ws' || !this.gateway) {
        socket.end(
          `HTTP/1.1 ${path === '/ws' ? '503 Service Unavailable' : '404 Not Found'}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n`,
        );
        return;
      }
      this.gateway.handleUpgrade(req, socket, head);
    });
  }

  /** Binds host:port (0 = any free port); resolves with the bound port. */
  listen(host: string, port: number): Promise<number> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, host, () => {
        this.server.off('error', reject);
        resolve((this.server.address() as AddressInfo).port);
      });
    });
  }

  /** Starts answering HTTP requests and WebSocket sessions with the finished application. */
  serve(ctx: AppContext): void {
    this.gateway = new WsGateway(ctx);
    this.http = createHttpHandler(ctx);
  }

  /** Stops accepting connections, drains in-flight requests, closes every socket. */
  async close(): Promise<void> {
    if (!this.server.listening) return;
    this.closing = true;
    const stopped = new Promise<void>((resolve) => this.server.close(() => resolve()));
    await this.gateway?.close();
    // server.close() has closed idle keep-alive connections; requests in progress finish first.
    await stopped;
  }
}
