#!/usr/bin/env node
// SPDX-License-Identifier: Apache-2.0
// openapi_check.js: validates an OpenAPI 3.1 document with @seriousme/openapi-schema-validator
// (the maintained validator pinned by package-lock.json) and lists what it describes, for
// tests/integ/test_openapi.py. With --answers FILE (a JSON array of {path, method, status,
// content_type, body}) it also checks each real answer's body against the schema the document
// gives that route and status (Ajv, JSON Schema 2020-12, the dialect of OpenAPI 3.1).
// Prints {"valid": bool, "errors": [...], "operations": ["GET /v1/rooms", ...],
//         "answers": [{"i": 0, "ok": bool, "errors": [...]}]}; an operation is
// "METHOD /path LISTENERS", LISTENERS its x-listeners joined by "," (absent: public).
// Usage: node openapi_check.js DOC.yaml [--answers FILE]
'use strict';
const fs = require('fs');
const { Validator } = require('@seriousme/openapi-schema-validator');
const Ajv2020 = require('ajv/dist/2020').default;

const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

function arg(name) {
  const i = process.argv.indexOf('--' + name);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

// The operation of a real request: the document path with that method whose {params} match
// the request path's segments.
function findOperation(doc, method, path) {
  const segs = path.split('?')[0].split('/');
  for (const [p, item] of Object.entries(doc.paths)) {
    const ps = p.split('/');
    if (item[method] && ps.length === segs.length &&
        ps.every((s, i) => s.startsWith('{') || s === segs[i])) {
      return item[method];
    }
  }
  return undefined;
}

function resolve(doc, o) {
  while (o && o.$ref) {
    o = o.$ref.replace(/^#\//, '').split('/').reduce((a, k) => a[k], doc);
  }
  return o;
}

async function main() {
  const file = process.argv[2];
  const validator = new Validator();
  const res = await validator.validate(file);
  const doc = validator.specification;
  const out = { valid: res.valid, errors: res.errors || [], operations: [], answers: [] };
  for (const [p, item] of Object.entries((doc && doc.paths) || {})) {
    for (const m of METHODS) {
      if (!item[m]) continue;
      const on = (item[m]['x-listeners'] || ['public']).join(',');
      out.operations.push(`${m.toUpperCase()} ${p} ${on}`);
    }
  }
  const answersFile = arg('answers');
  if (answersFile && res.valid) {
    // every component schema, addressable by its #/components/schemas/... $ref
    const ajv = new Ajv2020({ strict: false, allErrors: true });
    ajv.addSchema({ $id: 'doc', components: doc.components });
    const answers = JSON.parse(fs.readFileSync(answersFile, 'utf8'));
    answers.forEach((a, i) => {
      const r = { i, ok: false, errors: [] };
      const op = findOperation(doc, a.method.toLowerCase(), a.path);
      const resp = op && resolve(doc, (op.responses || {})[String(a.status)]);
      const media = resp && resp.content && resp.content[a.content_type.split(';')[0].trim()];
      if (!media) {
        r.errors.push(`no ${a.status} ${a.content_type} answer documented for ${a.method} ${a.path}`);
      } else {
        const schema = JSON.parse(JSON.stringify(media.schema).replaceAll('"#/components/', '"doc#/components/'));
        const check = ajv.compile(schema);
        r.ok = check(a.body);
        if (!r.ok) r.errors = check.errors.map((e) => `${e.instancePath} ${e.message}`);
      }
      out.answers.push(r);
    });
  }
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((e) => { console.error(e); process.exit(2); });
