// A tiny static file server for web/ on 127.0.0.1 (no dependencies).
//
//   node web/serve.mjs [port]        serve until stopped (default port 8080; 0 = any free port)
//
// The browser test imports serve() and stops it when done.

import http from 'node:http';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.dirname(fileURLToPath(import.meta.url));
// Packages a page imports, served read-only from node_modules under /vendor/NAME/ (the bench
// page's jax-js); nothing else in node_modules is served.
const VENDOR = { 'jax-js': 'node_modules/@jax-js/jax' };

const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json',
  '.wasm': 'application/wasm',
  '.png': 'image/png',
  '.svg': 'image/svg+xml',
  '.ts': 'text/plain; charset=utf-8',
};

/** Serve `root` on 127.0.0.1:`port`; resolves to the server once it listens. */
export function serve(root = ROOT, port = 0) {
  const server = http.createServer(async (req, res) => {
    try {
      const url = new URL(req.url, 'http://127.0.0.1');
      let rel = decodeURIComponent(url.pathname);
      if (rel.endsWith('/')) rel += 'index.html';
      const m = /^\/vendor\/([^/]+)(\/.*)$/.exec(rel);
      const vendor = m && Object.hasOwn(VENDOR, m[1]) ? m : null;
      const base = vendor ? path.join(root, VENDOR[vendor[1]]) : root;
      const file = path.join(base, path.normalize(vendor ? vendor[2] : rel));
      // Nothing outside the folder (or the vendored package), and not the test's own tooling.
      if (!file.startsWith(base + path.sep) || (base === root && file.includes(`${path.sep}node_modules${path.sep}`))) {
        res.writeHead(403).end('forbidden');
        return;
      }
      const body = await readFile(file);
      res.writeHead(200, {
        'content-type': TYPES[path.extname(file)] ?? 'application/octet-stream',
        'cache-control': 'no-store',
      });
      res.end(body);
    } catch {
      res.writeHead(404).end('not found');
    }
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve(server));
  });
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const port = Number(process.argv[2] ?? process.env.PORT ?? 8080);
  const server = await serve(ROOT, port);
  console.log(`brigade demo: http://127.0.0.1:${server.address().port}/  (Ctrl-C to stop)`);
}
