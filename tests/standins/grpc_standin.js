// SPDX-License-Identifier: Apache-2.0
// grpc_standin.js: what the gRPC stand-ins (activity_standin.js, wallet_standin.js) and the
// gRPC test client (grpc_client.js) share: command-line arguments, loading one proto file of
// proto/ with @grpc/proto-loader, serving a gRPC service on 127.0.0.1, and the plain HTTP control
// port through which a test reads a stand-in's record and scripts its failures.
'use strict';
const http = require('http');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

// The value after --NAME on the command line, or dflt.
function arg(name, dflt) {
  const i = process.argv.indexOf('--' + name);
  return i >= 0 ? process.argv[i + 1] : dflt;
}

// --proto-dir, by default the repository's proto/.
function protoDir() {
  return arg('proto-dir', path.join(__dirname, '..', '..', 'proto'));
}

// The gRPC package tree of proto/FILE (options: proto-loader's, merged over the stand-ins').
function loadProto(file, options) {
  const dir = protoDir();
  const def = protoLoader.loadSync(path.join(dir, file), {
    keepCase: true, longs: String, enums: String, defaults: true, includeDirs: [dir], ...options,
  });
  return grpc.loadPackageDefinition(def);
}

// Serves impl as service on 127.0.0.1:port (insecure), logging "NAME listening on ..." once
// bound; exits 1 when the port cannot be bound. Ends the process on SIGTERM.
function serve(name, service, impl, port) {
  const server = new grpc.Server();
  server.addService(service, impl);
  server.bindAsync(`127.0.0.1:${port}`, grpc.ServerCredentials.createInsecure(), (err) => {
    if (err) {
      console.error(err);
      process.exit(1);
    }
    console.log(`${name} listening on 127.0.0.1:${port}`);
  });
  process.on('SIGTERM', () => process.exit(0));
  return server;
}

// The control port on 127.0.0.1:port: routes maps "METHOD /path" or "/path" (any method) to a
// function of the parsed JSON body ({} when empty) that returns the JSON answer (undefined:
// {"ok": true}). Anything else answers 404.
function control(port, routes) {
  http.createServer((req, res) => {
    let body = '';
    req.on('data', (d) => { body += d; });
    req.on('end', () => {
      const route = routes[`${req.method} ${req.url}`] || routes[req.url];
      if (!route) {
        res.writeHead(404);
        return res.end('{}');
      }
      const out = route(body ? JSON.parse(body) : {});
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify(out === undefined ? { ok: true } : out));
    });
  }).listen(port, '127.0.0.1');
}

module.exports = { arg, protoDir, loadProto, serve, control, grpc };
