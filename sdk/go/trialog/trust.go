package trialog

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Record authentication (docs/protocol.md, "Record authentication"; trialog/trust/):
// an actor service holds one key, actors.<implementation>, tags what it writes with it
// and accepts only what the core tagged with it.

const (
	macPrefix = "mac."
	macLabel  = "trialog.mac.v1"
	keyLabel  = "trialog.key.v1"
)

// The headers a tag covers, in order, between the record key and the value.
var macHeaders = []string{"kind", "tick", "sender", "receiver", "id", "holder", "takeover"}

// Kinds the core addresses to actors: what an actor service verifies with its own key.
var toActors = map[string]bool{
	"trial.pending": true, "trial.started": true, "trial.rejected": true, "trial.terminating": true, "trial.ended": true,
	"trial.record": true, "observation": true, "actor.timeout": true, "actor.left": true, "reward": true, "message": true,
}

// ActorKey is the key of one actor implementation.
type ActorKey struct {
	ID     string // actors.<implementation>
	Secret []byte
}

func lp(b []byte) []byte {
	out := make([]byte, 4, 4+len(b))
	binary.BigEndian.PutUint32(out, uint32(len(b)))
	return append(out, b...)
}

// Derive is HMAC-SHA256(master, LP("trialog.key.v1") || LP(part)...).
func Derive(master []byte, parts ...string) []byte {
	m := hmac.New(sha256.New, master)
	m.Write(lp([]byte(keyLabel)))
	for _, p := range parts {
		m.Write(lp([]byte(p)))
	}
	return m.Sum(nil)
}

func (k ActorKey) mac(r *kgo.Record) []byte {
	h := map[string][]byte{}
	for _, x := range r.Headers {
		h[x.Key] = x.Value
	}
	m := hmac.New(sha256.New, k.Secret)
	m.Write(lp([]byte(macLabel)))
	m.Write(lp(r.Key))
	for _, name := range macHeaders {
		m.Write(lp(h[name]))
	}
	m.Write(lp(r.Value))
	return m.Sum(nil)
}

// Tag adds the record's tag by this key.
func (k ActorKey) Tag(r *kgo.Record) {
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: macPrefix + k.ID, Value: k.mac(r)})
}

// Check returns "" when the record carries a valid tag by this key, else the reason.
func (k ActorKey) Check(r *kgo.Record) string {
	var tag []byte
	for _, h := range r.Headers {
		if h.Key == macPrefix+k.ID {
			tag = h.Value
		}
	}
	if tag == nil {
		return fmt.Sprintf("not tagged for %s (forged, or written without the key)", k.ID)
	}
	if !hmac.Equal(tag, k.mac(r)) {
		return fmt.Sprintf("the tag of %s does not match the record (forged or altered)", k.ID)
	}
	return ""
}

func unb64(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(strings.TrimSpace(s), "="))
}

// LoadActorKey finds the key of an implementation, as Trialog's services do: the
// variable TRIALOG_KEY_ACTORS_<IMPL> (base64url; upper case, "." and "-" as "_"); else
// the keyring file (JSON {"keys": {...}}: actors.<impl>, or the actors master to derive
// it from); else, for a broker on this machine only, the development keyring.
func LoadActorKey(implementation, keyringFile string, brokers []string) (ActorKey, error) {
	id := "actors." + implementation
	env := "TRIALOG_KEY_" + strings.NewReplacer(".", "_", "-", "_").Replace(strings.ToUpper(id))
	// The order of Trialog's own services: a keyring file given wins (the variable is then not
	// read), else the variable, else the development keyring for a broker on this machine.
	if keyringFile == "" {
		if v := os.Getenv(env); v != "" {
			secret, err := unb64(v)
			if err != nil {
				return ActorKey{}, fmt.Errorf("%s is not base64url: %w", env, err)
			}
			return ActorKey{id, secret}, nil
		}
		if !loopback(brokers) {
			return ActorKey{}, fmt.Errorf("no key for %s: set %s (from `trialog keyring export --implementation %s`) or pass a keyring file", id, env, implementation)
		}
		state := os.Getenv("XDG_STATE_HOME")
		if state == "" {
			home, _ := os.UserHomeDir()
			state = filepath.Join(home, ".local", "state")
		}
		keyringFile = filepath.Join(state, "trialog", "dev-keyring.json")
	}
	raw, err := os.ReadFile(keyringFile)
	if err != nil {
		return ActorKey{}, fmt.Errorf("no key for %s: %v", id, err)
	}
	var doc struct {
		Keys map[string]string `json:"keys"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return ActorKey{}, fmt.Errorf("%s is not a Trialog keyring: %w", keyringFile, err)
	}
	if v, ok := doc.Keys[id]; ok {
		secret, err := unb64(v)
		return ActorKey{id, secret}, err
	}
	if v, ok := doc.Keys["actors"]; ok {
		master, err := unb64(v)
		return ActorKey{id, Derive(master, "actors", implementation)}, err
	}
	return ActorKey{}, fmt.Errorf("%s holds neither %s nor the actors master", keyringFile, id)
}

func loopback(brokers []string) bool {
	for _, b := range brokers {
		host, _, err := net.SplitHostPort(strings.TrimSpace(b))
		if err != nil {
			return false
		}
		if host == "localhost" {
			continue
		}
		ip := net.ParseIP(host)
		if ip == nil || !ip.IsLoopback() {
			return false
		}
	}
	return len(brokers) > 0
}
