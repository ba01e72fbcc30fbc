// The fields of a Kubernetes object that its kind's schema does not name ("spec.template.spec.
// containers[0].readinesProbe"), for tests/node/deploy_manifests.mjs. kubernetes-models'
// validators accept any field the schema does not name, as the API server's non-strict decoding
// does, so a misspelt optional field would pass them; this walks the object beside the type
// declarations the same packages ship (.d.ts: an interface per schema definition, generated from
// the same OpenAPI documents) and names every field none of them declares, as kubectl's
// --validate=strict would.
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

// A type declaration's tokens: strings, names, numbers, punctuation; comments left out.
function tokens(text) {
  const re = /"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[A-Za-z_$][\w$]*|-?\d+(?:\.\d+)?|[{}<>[\]:;?|(),=.&]/g;
  const code = text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/\/\/[^\n]*/g, '');
  return [...code.matchAll(re)].map((m) => m[0]);
}

// A type expression from tokens[at]: {object: {props, index}}, {array: type}, {ref: name},
// or {any: true} (a primitive, a literal, a union of those).
function parseType(t, at) {
  const alternatives = [];
  for (;;) {
    let type;
    if (t[at.i] === '{') {
      at.i++;
      const props = {};
      let index = null;
      while (t[at.i] !== '}') {
        if (t[at.i] === '[') {  // [key: string]: T;
          while (t[at.i] !== ']') at.i++;
          at.i += 2;
          index = parseType(t, at);
        } else {
          const name = t[at.i++].replace(/^["']|["']$/g, '');
          if (t[at.i] === '?') at.i++;
          at.i++;  // ':'
          props[name] = parseType(t, at);
        }
        if (t[at.i] === ';' || t[at.i] === ',') at.i++;
      }
      at.i++;
      type = { object: { props, index } };
    } else if (t[at.i] === 'Array' && t[at.i + 1] === '<') {
      at.i += 2;
      type = { array: parseType(t, at) };
      at.i++;  // '>'
    } else if (t[at.i] === '(') {
      at.i++;
      type = parseType(t, at);
      at.i++;
    } else {
      const word = t[at.i++];
      const named = /^[A-Z]/.test(word) && !['Record', 'Date'].includes(word);
      type = named ? { ref: word } : { any: true };
      if (t[at.i] === '[') {  // IDeployment["apiVersion"]
        while (t[at.i] !== ']') at.i++;
        at.i++;
        type = { any: true };
      }
    }
    alternatives.push(type);
    if (t[at.i] !== '|') break;
    at.i++;
  }
  // A union of objects is checked against none of them: its members' fields differ.
  return alternatives.length === 1 ? alternatives[0] : { any: true };
}

// The declaration of `name` (an interface or a type alias) in a .d.ts file, or under the name
// it is exported as; and the files its names come from.
const files = new Map();
function declarations(file) {
  if (!files.has(file)) {
    const text = readFileSync(file, 'utf8');
    const imports = {};
    for (const m of text.matchAll(/import \{([^}]*)\} from "([^"]+)"/g))
      for (const n of m[1].split(',').map((s) => s.trim()).filter(Boolean)) imports[n] = m[2];
    const aliases = {};
    for (const m of text.matchAll(/export \{([^}]*)\}/g))
      for (const part of m[1].split(',')) {
        const [from, as] = part.split(' as ').map((s) => s.trim());
        if (as) aliases[as] = from;
      }
    files.set(file, { text, imports, aliases, types: {} });
  }
  return files.get(file);
}

function resolve(file, name, modules) {
  const d = declarations(file);
  const local = d.aliases[name] ?? name;
  if (d.types[local]) return d.types[local];
  const decl = new RegExp(`export (?:interface ${local}\\b[^{]*|(?:declare )?type ${local}\\s*=)`);
  const m = decl.exec(d.text);
  if (m) {
    const t = tokens(d.text.slice(m.index + m[0].length));
    const type = parseType(t, { i: 0 });
    d.types[local] = { type, file };
    return d.types[local];
  }
  const from = d.imports[name];
  if (!from) return null;
  const target = from.startsWith('.') ? join(dirname(file), `${from}.d.ts`)
                                      : join(modules, `${from}.d.ts`);
  return resolve(target, name, modules);
}

// Every field of `value` that `type` (declared in `file`) does not name, as paths.
function walk(value, type, file, path, modules, out) {
  if (type.ref) {
    const r = resolve(file, type.ref, modules);
    if (!r) throw new Error(`no declaration of ${type.ref} from ${file}`);
    walk(value, r.type, r.file, path, modules, out);
    return;
  }
  if (type.array && Array.isArray(value)) {
    value.forEach((v, i) => walk(v, type.array, file, `${path}[${i}]`, modules, out));
    return;
  }
  if (!type.object || value === null || typeof value !== 'object' || Array.isArray(value)) return;
  for (const [key, v] of Object.entries(value)) {
    const where = path ? `${path}.${key}` : key;
    const field = type.object.props[key] ?? type.object.index;
    if (field) walk(v, field, file, where, modules, out);
    else out.push(where);
  }
}

export function unknownFields(object, declarationFile, typeName, modules) {
  const root = resolve(declarationFile, typeName, modules);
  if (!root) throw new Error(`no declaration of ${typeName} in ${declarationFile}`);
  const out = [];
  walk(object, root.type, root.file, '', modules, out);
  return out;
}
