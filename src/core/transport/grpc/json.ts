/**
 * JSON at the edge ↔ protobuf messages of a gRPC method, with proto-loader's conventions:
 * field names as written in the .proto (keepCase; the lowerCamelCase JSON name is accepted on
 * input too), 64-bit integers as strings, enums by name, bytes as base64, defaults written out.
 * Input is checked against the message type: an unknown field or a value of the wrong kind is a
 * 400 naming the field, never dropped or turned into 0 silently.
 */
import type protobuf from 'protobufjs';
import { protobufjs } from '../../../base/util/lazy-packages.js';

export class JsonShapeError extends Error {}

const INT32 = new Set(['int32', 'sint32', 'sfixed32', 'uint32', 'fixed32']);
const INT64 = new Set(['int64', 'sint64', 'sfixed64', 'uint64', 'fixed64']);
const FLOAT = new Set(['double', 'float']);
const DEPTH = 64;

/** The protobuf bytes of a JSON value for `type`; throws JsonShapeError naming the field. */
export function encodeJson(type: protobuf.Type, value: unknown): Uint8Array {
  const normalized = message(type, value ?? {}, '', 0);
  return type.encode(type.fromObject(normalized)).finish();
}

/** The JSON text of protobuf bytes of `type`. */
export function decodeToJson(type: protobuf.Type, bytes: Uint8Array): string {
  const msg = type.decode(bytes);
  const obj = type.toObject(msg, { longs: String, enums: String, bytes: String, defaults: true, arrays: true, objects: true });
  return JSON.stringify(ordered(type, obj, 0));
}

/** The fields of a decoded message in the order of the .proto (toObject puts arrays and maps first). */
function ordered(type: protobuf.Type, obj: Record<string, unknown>, depth: number): Record<string, unknown> {
  if (depth > DEPTH) return obj;
  const { MapField, Type } = protobufjs();
  const out: Record<string, unknown> = {};
  for (const f of type.fieldsArray) {
    if (!(f.name in obj)) continue;
    const v = obj[f.name];
    f.resolve();
    const sub = f.resolvedType;
    if (sub instanceof Type && v !== null && typeof v === 'object') {
      if (f instanceof MapField) out[f.name] = Object.fromEntries(Object.entries(v as Record<string, Record<string, unknown>>).map(([k, x]) => [k, ordered(sub, x, depth + 1)]));
      else if (Array.isArray(v)) out[f.name] = v.map((x: Record<string, unknown>) => ordered(sub, x, depth + 1));
      else out[f.name] = ordered(sub, v as Record<string, unknown>, depth + 1);
    } else out[f.name] = v;
  }
  for (const k of Object.keys(obj)) if (!(k in out)) out[k] = obj[k]; // oneof virtual fields, if any
  return out;
}

function message(type: protobuf.Type, value: unknown, path: string, depth: number): Record<string, unknown> {
  if (depth > DEPTH) throw new JsonShapeError(`${path || 'request'}: nested deeper than ${DEPTH}`);
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new JsonShapeError(`${path || 'request'}: must be a JSON object (${type.name})`);
  const { MapField } = protobufjs();
  const out: Record<string, unknown> = {};
  for (const [key, v] of Object.entries(value as Record<string, unknown>)) {
    const field = type.fields[key] ?? jsonNamed(type, key);
    const where = path ? `${path}.${key}` : key;
    if (!field) throw new JsonShapeError(`${where}: no such field in ${type.fullName.replace(/^\./, '')}`);
    if (v === null) continue; // proto3 JSON: null is the default
    field.resolve();
    if (field instanceof MapField) {
      if (typeof v !== 'object' || Array.isArray(v)) throw new JsonShapeError(`${where}: must be a JSON object (a map)`);
      const m: Record<string, unknown> = {};
      for (const [k, item] of Object.entries(v as Record<string, unknown>)) m[k] = single(field, item, `${where}.${k}`, depth);
      out[field.name] = m;
    } else if (field.repeated) {
      if (!Array.isArray(v)) throw new JsonShapeError(`${where}: must be a JSON array`);
      out[field.name] = v.map((item, i) => single(field, item, `${where}[${i}]`, depth));
    } else out[field.name] = single(field, v, where, depth);
  }
  return out;
}

function jsonNamed(type: protobuf.Type, key: string): protobuf.Field | undefined {
  for (const f of type.fieldsArray) if (camel(f.name) === key) return f;
  return undefined;
}

const camel = (name: string) => name.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());

function single(field: protobuf.Field, v: unknown, where: string, depth: number): unknown {
  const t = field.type;
  const resolved = field.resolvedType;
  const { Enum, Type } = protobufjs();
  if (resolved instanceof Type) return message(resolved, v, where, depth + 1);
  if (resolved instanceof Enum) {
    if (typeof v === 'string' && v in resolved.values) return v;
    if (typeof v === 'number' && Number.isInteger(v)) return v;
    throw new JsonShapeError(`${where}: must be one of ${Object.keys(resolved.values).join(', ')}`);
  }
  if (t === 'string') {
    if (typeof v !== 'string') throw new JsonShapeError(`${where}: must be a string`);
    return v;
  }
  if (t === 'bool') {
    if (typeof v !== 'boolean') throw new JsonShapeError(`${where}: must be true or false`);
    return v;
  }
  if (t === 'bytes') {
    if (typeof v !== 'string' || !/^[A-Za-z0-9+/_-]*={0,2}$/.test(v)) throw new JsonShapeError(`${where}: must be a base64 string`);
    return v;
  }
  if (INT32.has(t) || INT64.has(t)) {
    const unsigned = t.startsWith('u') || t.startsWith('fixed');
    const ok = (typeof v === 'number' && Number.isSafeInteger(v)) || (typeof v === 'string' && /^-?\d{1,20}$/.test(v));
    if (!ok) throw new JsonShapeError(`${where}: must be an integer (a number or a string of digits)`);
    const big = BigInt(v as number | string);
    const [min, max] = INT32.has(t) ? (unsigned ? [0n, 2n ** 32n - 1n] : [-(2n ** 31n), 2n ** 31n - 1n]) : unsigned ? [0n, 2n ** 64n - 1n] : [-(2n ** 63n), 2n ** 63n - 1n];
    if (big < min || big > max) throw new JsonShapeError(`${where}: out of range for ${t}`);
    return INT32.has(t) ? Number(big) : String(big);
  }
  if (FLOAT.has(t)) {
    if (typeof v === 'number') return v;
    if (v === 'NaN' || v === 'Infinity' || v === '-Infinity') return Number(v);
    if (typeof v === 'string' && v.trim() !== '' && Number.isFinite(Number(v))) return Number(v);
    throw new JsonShapeError(`${where}: must be a number`);
  }
  return v;
}
