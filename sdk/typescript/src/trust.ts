/**
 * Record authentication (docs/protocol.md, "Record authentication"; trialog/trust/):
 * an actor service holds one key, actors.<implementation>, tags what it writes with it
 * and accepts only what the core tagged with it.
 */
import { createHmac, timingSafeEqual } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { isIP } from "node:net";
import { join } from "node:path";

export type Headers = Record<string, Buffer>;

const MAC_PREFIX = "mac.";
const MAC_HEADERS = ["kind", "tick", "sender", "receiver", "id", "holder", "takeover"];

/** Kinds the core addresses to actors: what an actor service verifies with its own key. */
export const TO_ACTORS = new Set([
  "trial.pending", "trial.started", "trial.rejected", "trial.terminating", "trial.ended", "trial.record",
  "observation", "actor.timeout", "actor.left", "reward", "message",
]);

function lp(b: Buffer): Buffer {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(b.length);
  return Buffer.concat([len, b]);
}

/** HMAC-SHA256(master, LP("trialog.key.v1") || LP(part)...). */
export function derive(master: Buffer, ...parts: string[]): Buffer {
  const mac = createHmac("sha256", master).update(lp(Buffer.from("trialog.key.v1")));
  for (const p of parts) mac.update(lp(Buffer.from(p)));
  return mac.digest();
}

export class ActorKey {
  constructor(readonly id: string, readonly secret: Buffer) {}

  mac(key: Buffer, headers: Headers, value: Buffer): Buffer {
    const mac = createHmac("sha256", this.secret).update(lp(Buffer.from("trialog.mac.v1"))).update(lp(key));
    for (const name of MAC_HEADERS) mac.update(lp(headers[name] ?? Buffer.alloc(0)));
    return mac.update(lp(value)).digest();
  }

  /** The tag header to add to a record about to be written. */
  tag(key: Buffer, headers: Headers, value: Buffer): [string, Buffer] {
    return [MAC_PREFIX + this.id, this.mac(key, headers, value)];
  }

  /** "" when the record carries a valid tag by this key, else the reason. */
  check(key: Buffer, headers: Headers, value: Buffer): string {
    const tag = headers[MAC_PREFIX + this.id];
    if (!tag) return `not tagged for ${this.id} (forged, or written without the key)`;
    const want = this.mac(key, headers, value);
    if (tag.length !== want.length || !timingSafeEqual(tag, want)) return `the tag of ${this.id} does not match the record (forged or altered)`;
    return "";
  }
}

const unb64 = (s: string) => Buffer.from(s.trim(), "base64url");

/**
 * The key of an implementation, found as Trialog's services find theirs: the variable
 * TRIALOG_KEY_ACTORS_<IMPL> (base64url; upper case, "." and "-" as "_"); else the keyring
 * file (JSON {"keys": {...}}: actors.<impl>, or the actors master to derive it from);
 * else, for a broker on this machine only, the development keyring.
 */
export function loadActorKey(implementation: string, keyringFile: string, brokers: string[], env = process.env): ActorKey {
  const id = `actors.${implementation}`;
  const variable = `TRIALOG_KEY_${id.toUpperCase().replace(/[.-]/g, "_")}`;
  // The order of Trialog's own services: a keyring file given wins (the variable is then not
  // read), else the variable, else the development keyring for a broker on this machine.
  let file = keyringFile;
  if (!file && env[variable]) return new ActorKey(id, unb64(env[variable]!));
  if (!file) {
    if (!brokers.every(isLoopback)) throw new Error(`no key for ${id}: set ${variable} (from \`trialog keyring export --implementation ${implementation}\`) or pass a keyring file`);
    file = join(env.XDG_STATE_HOME || join(homedir(), ".local", "state"), "trialog", "dev-keyring.json");
  }
  if (!existsSync(file)) throw new Error(`no key for ${id}: ${file} does not exist`);
  const keys: Record<string, string> = JSON.parse(readFileSync(file, "utf8")).keys ?? {};
  if (keys[id]) return new ActorKey(id, unb64(keys[id]));
  if (keys.actors) return new ActorKey(id, derive(unb64(keys.actors), "actors", implementation));
  throw new Error(`${file} holds neither ${id} nor the actors master`);
}

function isLoopback(server: string): boolean {
  const host = server.trim().replace(/:\d+$/, "").replace(/^\[|\]$/g, "");
  if (host === "localhost") return true;
  if (isIP(host) === 4) return host.startsWith("127.");
  return host === "::1";
}

/**
 * A join token ("tl1.<payload>.<mac>", minted by the operator's controller or the
 * gateway): the seat and its key. The MAC is for the minter to check; a client learns
 * whether the token was honoured from the log.
 */
export function parseJoinToken(token: string, holder: string): { seat: { trial: string; actor: string; holder: string }; key: ActorKey } {
  const parts = token.trim().split(".");
  if (parts.length !== 3 || parts[0] !== "tl1") throw new Error("not a Trialog join token (want tl1.<payload>.<mac>)");
  const claims = JSON.parse(unb64(parts[1]).toString("utf8"));
  if (!claims.actor || !claims.trial || !claims.seat_key) throw new Error("join token claims are not {actor, trial, seat_key, exp}");
  return { seat: { trial: claims.trial, actor: claims.actor, holder }, key: new ActorKey(`seat.${claims.actor}`, unb64(claims.seat_key)) };
}
