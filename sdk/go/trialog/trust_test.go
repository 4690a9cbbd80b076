package trialog

import (
	"bytes"
	"crypto/hmac"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The key and tag of a fixed record as Python's trialog.trust computes them
// (derive(master, "actors", "go"), compute_tag(key, mac_input(...))): a change of the
// encoding on either side fails here.
const (
	wantDerived = "cf350bd079e6bfc8d5d6dff9eaed11e22efc54638c74e94eebe12e078f54588d"
	wantTag     = "42a7a91b9f8706045a9cf32e47b8e51c58872efdbe42f24b49294b15b55b5c32"
)

func TestTagMatchesPython(t *testing.T) {
	key := ActorKey{"actors.go", Derive([]byte("0123456789abcdef0123456789abcdef"), "actors", "go")}
	if got := hex.EncodeToString(key.Secret); got != wantDerived {
		t.Fatalf("derived key %s, want %s", got, wantDerived)
	}
	r := &kgo.Record{Key: []byte("trial-1"), Value: []byte("value"), Headers: eventHeaders("action", 3, "bob", "", "trialog.Action", "")}
	key.Tag(r)
	if got := hex.EncodeToString(r.Headers[len(r.Headers)-1].Value); got != wantTag {
		t.Fatalf("tag %s, want %s", got, wantTag)
	}
	if reason := key.Check(r); reason != "" {
		t.Fatal(reason)
	}
	r.Value = []byte("altered")
	if key.Check(r) == "" {
		t.Fatal("an altered record passed the check")
	}
}

// A join token minted by Python's trialog.trust.join_tokens.mint_join_token (the seats master of
// TestTagMatchesPython, trial-1, bob): its seat key is derive(seats, "seat", trial, actor).
func TestJoinTokenGivesTheSeatAndItsKey(t *testing.T) {
	token := "tl1.eyJhY3RvciI6ImJvYiIsImV4cCI6MTcwMDAwMzYwMCwic2VhdF9rZXkiOiJoZUE1RXRmdlVwWVMzRG1aaWpJbjZJU3hhdVE0bHlTV2JaMkZkRGFuOGNjIiwidHJpYWwiOiJ0cmlhbC0xIn0.LAABZ9-uz1firJ8LofJjIFsD132jUDvmMf9vSm8YwTQ"
	seat, key, err := ParseJoinToken(token, "holder-1")
	if err != nil {
		t.Fatal(err)
	}
	if *seat != (Seat{Trial: "trial-1", Actor: "bob", Holder: "holder-1"}) || key.ID != "seat.bob" {
		t.Fatalf("seat %+v key %s", *seat, key.ID)
	}
	if want := Derive([]byte("0123456789abcdef0123456789abcdef"), "seat", "trial-1", "bob"); !hmac.Equal(key.Secret, want) {
		t.Fatal("seat key differs from derive(seats, seat, trial, actor)")
	}
	if _, _, err := ParseJoinToken("tl2.x.y", "h"); err == nil {
		t.Fatal("a malformed token was accepted")
	}
}

// The order of Trialog's own services: a keyring file given wins over the variable, which is
// read only when no file is given; no key at all for a remote cluster is an error.
func TestAKeyringFileWinsOverTheVariable(t *testing.T) {
	master := bytes.Repeat([]byte{7}, 32)
	file := filepath.Join(t.TempDir(), "keyring.json")
	doc := `{"trialog_keyring": 1, "keys": {"actors": "` + base64.RawURLEncoding.EncodeToString(master) + `"}}`
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	variable := bytes.Repeat([]byte{9}, 32)
	t.Setenv("TRIALOG_KEY_ACTORS_GO", base64.RawURLEncoding.EncodeToString(variable))
	remote := []string{"kafka.example:9092"}
	fromFile, err := LoadActorKey("go", file, remote)
	if err != nil || !hmac.Equal(fromFile.Secret, Derive(master, "actors", "go")) {
		t.Fatalf("the keyring file's key, not the variable's: %v %x", err, fromFile.Secret)
	}
	fromVariable, err := LoadActorKey("go", "", remote)
	if err != nil || !hmac.Equal(fromVariable.Secret, variable) {
		t.Fatalf("the variable's key without a file: %v %x", err, fromVariable.Secret)
	}
	t.Setenv("TRIALOG_KEY_ACTORS_GO", "")
	if _, err := LoadActorKey("go", "", remote); err == nil {
		t.Fatal("no key for a remote cluster must be an error")
	}
}
