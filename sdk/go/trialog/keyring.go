package trialog

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Keyring holds the keys of a core service (an environment service holds the whole
// keyring: docs/protocol.md, "Keys"): the role keys (orchestrator, environment,
// controller, gateway, learner) and the masters actors and seats, from which it derives
// actors.<impl> and seat.<actor> of a trial.
type Keyring struct {
	keys   map[string][]byte
	Source string // where the keys came from, for messages
}

// NewKeyring makes a keyring of key id → secret.
func NewKeyring(keys map[string][]byte, source string) *Keyring {
	return &Keyring{keys: keys, Source: source}
}

// Key is the secret of a key id, derived for actors.<impl> and seat.<actor> (of trialID)
// when the keyring holds their master; nil when it cannot give it.
func (k *Keyring) Key(id, trialID string) []byte {
	if secret, ok := k.keys[id]; ok {
		return secret
	}
	if impl, ok := strings.CutPrefix(id, "actors."); ok && k.keys["actors"] != nil {
		return Derive(k.keys["actors"], "actors", impl)
	}
	if actor, ok := strings.CutPrefix(id, "seat."); ok && k.keys["seats"] != nil && trialID != "" {
		return Derive(k.keys["seats"], "seat", trialID, actor)
	}
	return nil
}

// TagWith adds the tags of the key ids (each once, in order) to a record of trialID.
func (k *Keyring) TagWith(r *kgo.Record, trialID string, ids ...string) error {
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		secret := k.Key(id, trialID)
		if secret == nil {
			return fmt.Errorf("the keyring (%s) cannot give %s", k.Source, id)
		}
		ActorKey{ID: id, Secret: secret}.Tag(r)
	}
	return nil
}

// CheckAny returns "" when the record carries a valid tag by one of the key ids, else why not.
func (k *Keyring) CheckAny(r *kgo.Record, trialID string, ids ...string) string {
	reason := "no key to check it with"
	for _, id := range ids {
		secret := k.Key(id, trialID)
		if secret == nil {
			continue
		}
		if reason = (ActorKey{ID: id, Secret: secret}).Check(r); reason == "" {
			return ""
		}
	}
	return reason
}

// LoadKeyring finds a core service's keys as Trialog's services do
// (docs/protocol.md, "Where a service finds its keys"): the keyring file or folder
// given (TRIALOG_KEYRING), else the TRIALOG_KEY_<ID> variables, else — for a broker on
// this machine only — the development keyring.
func LoadKeyring(path string, brokers []string) (*Keyring, error) {
	if path != "" {
		return readKeyring(path)
	}
	found := map[string][]byte{}
	for _, kv := range os.Environ() {
		name, value, _ := strings.Cut(kv, "=")
		rest, ok := strings.CutPrefix(name, "TRIALOG_KEY_")
		if !ok || value == "" {
			continue
		}
		secret, err := unb64(value)
		if err != nil {
			return nil, fmt.Errorf("%s is not base64url: %w", name, err)
		}
		found[keyIDOfVariable(rest)] = secret
	}
	if len(found) > 0 {
		return NewKeyring(found, "TRIALOG_KEY_* variables"), nil
	}
	if !loopback(brokers) {
		return nil, fmt.Errorf("no keyring for the cluster at %s: pass a keyring file (TRIALOG_KEYRING) or the TRIALOG_KEY_* variables", strings.Join(brokers, ","))
	}
	return readKeyring(devKeyringPath())
}

// keyIDOfVariable maps the rest of a TRIALOG_KEY_<ID> name back to a key id: the role
// keys and masters are single words; ACTORS_X is actors.x, SEAT_X is seat.x (the
// variable's "_" stands for "." or "-": the implementation's own spelling is lost, so a
// derived key is better given through its master).
func keyIDOfVariable(rest string) string {
	lower := strings.ToLower(rest)
	for _, prefix := range []string{"actors_", "seat_"} {
		if after, ok := strings.CutPrefix(lower, prefix); ok {
			return strings.TrimSuffix(prefix, "_") + "." + after
		}
	}
	return lower
}

func devKeyringPath() string {
	state := os.Getenv("XDG_STATE_HOME")
	if state == "" {
		home, _ := os.UserHomeDir()
		state = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(state, "trialog", "dev-keyring.json")
}

func readKeyring(path string) (*Keyring, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read the keyring %s: %w", path, err)
	}
	keys := map[string][]byte{}
	if info.IsDir() { // one file per key id (a mounted Kubernetes Secret); dot files skipped
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".") || e.IsDir() {
				continue
			}
			raw, err := os.ReadFile(filepath.Join(path, e.Name()))
			if err != nil {
				return nil, err
			}
			if keys[e.Name()], err = unb64(string(raw)); err != nil {
				return nil, fmt.Errorf("%s/%s is not base64url: %w", path, e.Name(), err)
			}
		}
		return NewKeyring(keys, path), nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Keys map[string]string `json:"keys"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("%s is not a Trialog keyring: %w", path, err)
	}
	for id, v := range doc.Keys {
		if keys[id], err = unb64(v); err != nil {
			return nil, fmt.Errorf("%s: key %s is not base64url: %w", path, id, err)
		}
	}
	return NewKeyring(keys, path), nil
}

// IDs lists the key ids held (not the derived ones), sorted.
func (k *Keyring) IDs() []string {
	out := make([]string, 0, len(k.keys))
	for id := range k.keys {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}
