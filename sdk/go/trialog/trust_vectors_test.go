package trialog

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// schemas/vectors/trust.json, written by Python's trialog.trust: the keyring's masters,
// keys derived from them, and the tags of some event vectors. This library must derive
// and tag the same bytes.
type trustVectors struct {
	Keyring struct {
		Keys map[string]string `json:"keys"`
	} `json:"keyring"`
	DerivedKeys []struct {
		KeyID  string   `json:"key_id"`
		Master string   `json:"master"`
		Parts  []string `json:"parts"`
		KeyHex string   `json:"key_hex"`
	} `json:"derived_keys"`
	Tags []struct {
		Vector    string            `json:"vector"`
		RecordKey string            `json:"record_key"`
		Headers   map[string]string `json:"headers"`
		Tags      map[string]string `json:"tags"`
	} `json:"tags"`
	JoinToken struct {
		Token string `json:"token"`
		Actor string `json:"actor"`
		Trial string `json:"trial"`
	} `json:"join_token"`
}

// readTrustVectors reads schemas/vectors/trust.json.
func readTrustVectors(t *testing.T) trustVectors {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(schemasDir, "vectors", "trust.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v trustVectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestTrustVectors(t *testing.T) {
	v := readTrustVectors(t)
	keys := map[string][]byte{}
	for id, text := range v.Keyring.Keys {
		var err error
		if keys[id], err = unb64(text); err != nil {
			t.Fatalf("keyring key %s: %v", id, err)
		}
	}
	for _, d := range v.DerivedKeys {
		got := Derive(keys[d.Master], d.Parts...)
		if hex.EncodeToString(got) != d.KeyHex {
			t.Fatalf("%s: derived %x, want %s", d.KeyID, got, d.KeyHex)
		}
		keys[d.KeyID] = got
	}
	files := map[string]string{}
	for _, m := range readManifest(t).Vectors {
		files[m.Name] = m.File
	}
	if len(v.Tags) == 0 {
		t.Fatal("trust.json holds no tags")
	}
	for _, tv := range v.Tags {
		value, err := os.ReadFile(filepath.Join(schemasDir, "vectors", files[tv.Vector]))
		if err != nil {
			t.Fatal(err)
		}
		r := &kgo.Record{Key: []byte(tv.RecordKey), Value: value}
		for name, text := range tv.Headers {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: name, Value: []byte(text)})
		}
		for header, want := range tv.Tags {
			id := header[len(macPrefix):]
			if got := hex.EncodeToString((ActorKey{id, keys[id]}).mac(r)); got != want {
				t.Fatalf("%s, %s: tag %s, want %s", tv.Vector, header, got, want)
			}
		}
	}
	_, key, err := ParseJoinToken(v.JoinToken.Token, "h")
	if err != nil {
		t.Fatal(err)
	}
	if want := keys["seat."+v.JoinToken.Actor]; hex.EncodeToString(key.Secret) != hex.EncodeToString(want) {
		t.Fatal("the join token's seat key differs from derive(seats, seat, trial, actor)")
	}
}
