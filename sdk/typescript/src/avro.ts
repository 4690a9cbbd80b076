/**
 * Avro single-object encoding by fingerprint, on avsc (docs/interop.md).
 *
 * Two choices every Trialog reader in JavaScript must make, made here once:
 * - `long` is decoded as `BigInt`: seeds are any signed 64-bit value (a test vector
 *   holds -2^63) and JavaScript numbers are exact only to 2^53 (docs/protocol.md,
 *   "64-bit numbers in JavaScript");
 * - unions are always wrapped, `{"<branch>": value}` or `null`, as Avro's JSON encoding
 *   writes them, so a value never depends on guessing a branch.
 */
import avro from "avsc";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

export const MARKER = Buffer.from([0xc3, 0x01]);

/** `long` as BigInt; numbers that are safe integers are accepted when writing. */
export const LongAsBigInt = avro.types.LongType.__with({
  fromBuffer: (buf: Buffer) => buf.readBigInt64LE(),
  toBuffer: (n: bigint | number) => {
    const buf = Buffer.alloc(8);
    buf.writeBigInt64LE(BigInt(n));
    return buf;
  },
  fromJSON: (v: unknown) => BigInt(v as string),
  toJSON: (n: bigint) => Number(n),
  isValid: (n: unknown) => typeof n === "bigint" || (typeof n === "number" && Number.isSafeInteger(n)),
  compare: (a: bigint, b: bigint) => (a < b ? -1 : a > b ? 1 : 0),
});

const OPTIONS = { wrapUnions: true } as const;

export interface Schema {
  type: avro.Type;
  fingerprint: Buffer; // CRC-64-AVRO of the canonical form, little-endian (as on the wire)
  fullName: string;
}

/** Every schema a service knows, by fingerprint and by full name. */
export class Store {
  private byFingerprint = new Map<string, Schema>();
  private byName = new Map<string, Schema>();
  private registry: Record<string, avro.Type> = {};

  /**
   * Trialog's schemas/ directory, then the earlier versions kept in schemas/previous
   * (writer schemas of older records, read into the current types by schema
   * resolution); files referring to others' types are parsed after them.
   */
  static loadDir(dir: string): Store {
    const store = new Store();
    const files = (d: string) => (existsSync(d) ? readdirSync(d).filter((f) => f.endsWith(".avsc")).sort().map((f) => join(d, f)) : []);
    const current = files(dir);
    if (current.length === 0) throw new Error(`no .avsc files in ${dir}: pass the path of Trialog's schemas/ directory`);
    store.parseFiles(current, store.registry, true);
    store.parseFiles(files(join(dir, "previous")), { ...store.registry }, false);
    return store;
  }

  private parseFiles(paths: string[], registry: Record<string, avro.Type>, current: boolean): void {
    let pending = paths;
    while (pending.length > 0) {
      const retry: string[] = [];
      let lastError: unknown;
      for (const path of pending) {
        const schema = JSON.parse(readFileSync(path, "utf8"));
        const attempt = { ...registry, long: LongAsBigInt } as Record<string, avro.Type>;
        if (!current) delete attempt[fullName(schema)]; // an older version of a type defined already
        try {
          const type = avro.Type.forSchema(schema, { ...OPTIONS, registry: attempt });
          delete attempt.long;
          Object.assign(registry, attempt);
          this.add(type, current);
        } catch (err) {
          retry.push(path);
          lastError = err;
        }
      }
      if (retry.length === pending.length) throw lastError;
      pending = retry;
    }
  }

  /** Register a self-contained schema (JSON text or object); the same schema twice gives the first. */
  register(schema: string | object): Schema {
    const parsed = typeof schema === "string" ? JSON.parse(schema) : schema;
    return this.add(avro.Type.forSchema(plainLongs(parsed), { ...OPTIONS, registry: { long: LongAsBigInt } }), true);
  }

  /** Index a schema by fingerprint, and by name unless it is an older version. */
  private add(type: avro.Type, byName: boolean): Schema {
    const fingerprint = crc64Avro(Buffer.from(canonicalForm(type)));
    const key = fingerprint.toString("hex");
    const known = this.byFingerprint.get(key);
    if (known) return known;
    const schema = { type, fingerprint, fullName: type.name ?? type.typeName };
    this.byFingerprint.set(key, schema);
    if (byName) this.byName.set(schema.fullName, schema);
    return schema;
  }

  byFullName(name: string): Schema | undefined {
    return this.byName.get(name);
  }

  /** The writer schema of a single-object encoded value. */
  writer(value: Buffer): Schema {
    if (value.length < 10 || value[0] !== MARKER[0] || value[1] !== MARKER[1]) {
      throw new Error("not an Avro single-object encoding (no C3 01 marker)");
    }
    const schema = this.byFingerprint.get(value.subarray(2, 10).toString("hex"));
    if (!schema) throw new Error(`unknown writer schema: fingerprint ${value.subarray(2, 10).toString("hex")}`);
    return schema;
  }

  /** Decode with the writer schema, resolved into `reader` when given (Avro's schema resolution). */
  decode(value: Buffer, reader?: Schema): any {
    const writer = this.writer(value);
    const body = value.subarray(10);
    if (!reader || reader.fingerprint.equals(writer.fingerprint)) return writer.type.fromBuffer(body);
    return reader.type.fromBuffer(body, reader.type.createResolver(writer.type));
  }
}

/**
 * `{"type": "long", ...attributes}` as plain "long", so that avsc applies the BigInt long
 * type to it too (it does so for the name only). Attributes are not part of the
 * Parsing Canonical Form: the fingerprint stays the same.
 */
function plainLongs(schema: any): any {
  if (Array.isArray(schema)) return schema.map(plainLongs);
  if (schema === null || typeof schema !== "object") return schema;
  if (schema.type === "long") return "long";
  const out = { ...schema };
  for (const key of ["type", "items", "values"]) if (key in out) out[key] = plainLongs(out[key]);
  if (Array.isArray(out.fields)) out.fields = out.fields.map((f: any) => ({ ...f, type: plainLongs(f.type) }));
  return out;
}

function fullName(schema: { name?: string; namespace?: string }): string {
  const name = schema.name ?? "";
  return name.includes(".") || !schema.namespace ? name : `${schema.namespace}.${name}`;
}

/** Encode `value` as a single-object encoding with `schema`. */
export function encode(schema: Schema, value: unknown): Buffer {
  return Buffer.concat([MARKER, schema.fingerprint, schema.type.toBuffer(value)]);
}

/** avsc's schema() without attributes is the schema's Parsing Canonical Form. */
export function canonicalForm(type: avro.Type): string {
  return JSON.stringify(type.schema());
}

const EMPTY = 0xc15d213aa4d7a795n;
const MASK = 0xffffffffffffffffn;
const TABLE: bigint[] = Array.from({ length: 256 }, (_, i) => {
  let fp = BigInt(i);
  for (let j = 0; j < 8; j++) fp = (fp >> 1n) ^ (EMPTY & -(fp & 1n) & MASK);
  return fp;
});

/** CRC-64-AVRO, little-endian bytes. */
export function crc64Avro(data: Buffer): Buffer {
  let fp = EMPTY;
  for (const b of data) fp = (fp >> 8n) ^ TABLE[Number((fp ^ BigInt(b)) & 0xffn)];
  const out = Buffer.alloc(8);
  out.writeBigUInt64LE(fp & MASK);
  return out;
}
