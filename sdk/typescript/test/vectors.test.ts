/**
 * Every vector of schemas/vectors decodes with avsc to the manifest's `expected` value;
 * the evolution vector is read through its reader schema.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { canonicalForm, Store } from "../src/avro.js";

const SCHEMAS = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..", "schemas");
const VECTORS = join(SCHEMAS, "vectors");

/** JSON with integers kept exact (BigInt): a vector holds -2^63. */
export function parseExactJSON(text: string): unknown {
  let i = 0;
  const ws = () => {
    while (/\s/.test(text[i])) i++;
  };
  const value = (): unknown => {
    ws();
    const c = text[i];
    if (c === "{") {
      i++;
      const out: Record<string, unknown> = {};
      ws();
      if (text[i] === "}") return i++, out;
      for (;;) {
        ws();
        const key = value() as string;
        ws();
        i++; // :
        out[key] = value();
        ws();
        if (text[i++] === "}") return out;
      }
    }
    if (c === "[") {
      i++;
      const out: unknown[] = [];
      ws();
      if (text[i] === "]") return i++, out;
      for (;;) {
        out.push(value());
        ws();
        if (text[i++] === "]") return out;
      }
    }
    if (c === '"') {
      const start = i++;
      while (text[i] !== '"') i += text[i] === "\\" ? 2 : 1;
      return JSON.parse(text.slice(start, ++i));
    }
    const m = /^(-?\d+)(\.\d+)?([eE][+-]?\d+)?|^(true|false|null)/.exec(text.slice(i, i + 64))!;
    i += m[0].length;
    if (m[4]) return JSON.parse(m[4]);
    return m[2] || m[3] ? Number(m[0]) : BigInt(m[1]);
  };
  return value();
}

// Schemas as plain JSON (avsc wants numbers there); expected values with exact integers.
const manifestText = readFileSync(join(VECTORS, "manifest.json"), "utf8");
const manifest = JSON.parse(manifestText) as { vectors: any[] };
const exact = parseExactJSON(manifestText) as { vectors: any[] };
const builtin = Store.loadDir(SCHEMAS);

function fail(path: string, message: string): never {
  throw new assert.AssertionError({ message: `${path}: ${message}` });
}

/** Walk the schema: bytes as base64, unions as {branch: value}, non-finite floats as strings. */
export function compare(type: any, got: any, want: any, path = "$"): void {
  switch (type.typeName) {
    case "record":
    case "error":
      for (const f of type.fields) compare(f.type, got[f.name], want?.[f.name], `${path}.${f.name}`);
      return;
    case "union:wrapped": {
      if (want === null) return void (got === null || fail(path, `want null, got ${JSON.stringify(got)}`));
      const [branch] = Object.keys(want);
      const [gotBranch] = Object.keys(got ?? {});
      if (branch !== gotBranch) fail(path, `union branch ${gotBranch}, want ${branch}`);
      const t = type.types.find((b: any) => b.branchName === branch);
      return compare(t, got[branch], want[branch], `${path}<${branch}>`);
    }
    case "array":
      if (got.length !== want.length) fail(path, `${got.length} items, want ${want.length}`);
      got.forEach((g: any, k: number) => compare(type.itemsType, g, want[k], `${path}[${k}]`));
      return;
    case "map":
      assert.deepEqual(Object.keys(got).sort(), Object.keys(want).sort(), path);
      for (const k of Object.keys(want)) compare(type.valuesType, got[k], want[k], `${path}[${k}]`);
      return;
    case "bytes":
    case "fixed":
      if (!Buffer.from(want, "base64").equals(got)) fail(path, `bytes ${got.toString("hex")}`);
      return;
    case "int":
      if (got !== Number(want)) fail(path, `${got}, want ${want}`);
      return;
    case "long":
      if (typeof got !== "bigint" || got !== BigInt(want)) fail(path, `${String(got)} (${typeof got}), want ${want}`);
      return;
    case "float":
    case "double": {
      const w = typeof want === "string" ? ({ NaN: NaN, Infinity: Infinity, "-Infinity": -Infinity } as any)[want] : Number(want);
      const exact = type.typeName === "float" ? Math.fround(w) : w;
      if (!Object.is(got, exact)) fail(path, `${got}, want ${want}`);
      return;
    }
    default: // null, boolean, string, enum
      if (got !== want) fail(path, `${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
  }
}

manifest.vectors.forEach((v, index) => {
  test(`vector ${v.name}`, () => {
    const store = new Store();
    const writer = store.register(v.schema);
    assert.equal(canonicalForm(writer.type), v.canonical, "canonical form");
    assert.equal(writer.fingerprint.toString("hex"), v.fingerprint, "fingerprint");
    const value = readFileSync(join(VECTORS, v.file));
    if (v.kafka) assert.doesNotThrow(() => builtin.writer(value), "schemas/ (with previous/) holds the writer schema");
    let reader = writer;
    if (v.reader_schema) {
      reader = store.register(v.reader_schema);
      assert.equal(reader.fingerprint.toString("hex"), v.reader_fingerprint, "reader fingerprint");
    }
    const known = builtin.byFullName(v.schema_name);
    if (known) assert.ok(known.fingerprint.equals(reader.fingerprint), "schemas/*.avsc give the vector's (reader) schema");
    const decoded = store.decode(value, reader);
    compare(reader.type, decoded, exact.vectors[index].expected);
    if (v.payload_vector) {
      assert.ok(decoded.payload.equals(readFileSync(join(VECTORS, `${v.payload_vector}.bin`))), "nested payload");
    }
  });
});

test("a long beyond 2^53 stays exact, and the comparison can fail", () => {
  const seed = new Store().register({ type: "record", name: "S", fields: [{ name: "seed", type: "long" }] });
  const min = -(2n ** 63n);
  assert.equal(seed.type.fromBuffer(seed.type.toBuffer({ seed: min })).seed, min);
  assert.throws(() => compare({ typeName: "long" }, 1n, 2n), /want 2/);
  assert.throws(() => compare({ typeName: "double" }, 0, "NaN"), /want NaN/);
});
