// Package trialog is a small library for writing Trialog actor services in Go:
// Avro single-object encoding by fingerprint, Trialog's event records, and an
// actor service over franz-go (consume, decode, answer observations, deliver
// rewards and messages, commit the safe point). The protocol it follows is
// docs/protocol.md of the Trialog repository.
package trialog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/hamba/avro/v2"
)

// Marker opens every single-object encoding (Avro specification, "Single object encoding").
var Marker = []byte{0xC3, 0x01}

// ErrUnknownSchema means a value's writer fingerprint is not in the store.
var ErrUnknownSchema = errors.New("unknown writer schema")

// Schema is a parsed Avro schema with its CRC-64-AVRO fingerprint (little-endian, as on the wire).
type Schema struct {
	Avro        avro.Schema
	Fingerprint [8]byte
}

// FullName is the schema's name when it is a named type, else its type.
func (s *Schema) FullName() string {
	if n, ok := s.Avro.(avro.NamedSchema); ok {
		return n.FullName()
	}
	return string(s.Avro.Type())
}

// Store holds every schema a service knows, by fingerprint and by full name.
type Store struct {
	mu     sync.RWMutex
	byFP   map[[8]byte]*Schema
	byName map[string]*Schema
	cache  *avro.SchemaCache // Trialog's named types, so schemas may refer to them
}

// NewStore returns an empty store.
func NewStore() *Store {
	return &Store{byFP: map[[8]byte]*Schema{}, byName: map[string]*Schema{}, cache: &avro.SchemaCache{}}
}

// LoadDir parses every .avsc file of dir (Trialog's schemas/), then the earlier
// versions kept in dir/previous (writer schemas of older records: they decode, into
// the current types by schema resolution); files that refer to types of other files
// are parsed after them.
func LoadDir(dir string) (*Store, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.avsc"))
	if err != nil || len(paths) == 0 {
		return nil, fmt.Errorf("no .avsc files in %s: pass the path of Trialog's schemas/ directory", dir)
	}
	s := NewStore()
	if err := s.parseFiles(paths, s.cache, true); err != nil {
		return nil, err
	}
	previous, _ := filepath.Glob(filepath.Join(dir, "previous", "*.avsc"))
	older := &avro.SchemaCache{}
	older.AddAll(s.cache)
	if err := s.parseFiles(previous, older, false); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Store) parseFiles(paths []string, cache *avro.SchemaCache, current bool) error {
	sort.Strings(paths)
	pending := paths
	for len(pending) > 0 {
		var retry []string
		var lastErr error
		for _, p := range pending {
			text, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			schema, err := avro.ParseWithCache(string(text), "", cache)
			if err != nil {
				retry, lastErr = append(retry, p), fmt.Errorf("%s: %w", p, err)
				continue
			}
			s.add(schema, current)
		}
		if len(retry) == len(pending) {
			return lastErr
		}
		pending = retry
	}
	return nil
}

// Register parses a self-contained schema (JSON text) and adds it; registering the
// same schema twice returns the first.
func (s *Store) Register(schemaJSON string) (*Schema, error) {
	parsed, err := avro.ParseWithCache(schemaJSON, "", &avro.SchemaCache{})
	if err != nil {
		return nil, fmt.Errorf("invalid Avro schema: %w", err)
	}
	return s.add(parsed, true), nil
}

// add indexes a schema by fingerprint, and by name unless it is an older version.
func (s *Store) add(parsed avro.Schema, byName bool) *Schema {
	fp := fingerprint(parsed)
	s.mu.Lock()
	defer s.mu.Unlock()
	if known, ok := s.byFP[fp]; ok {
		return known
	}
	schema := &Schema{Avro: parsed, Fingerprint: fp}
	s.byFP[fp] = schema
	if byName {
		s.byName[schema.FullName()] = schema
	}
	return schema
}

// ByName returns a Trialog schema by full name (e.g. "trialog.Action").
func (s *Store) ByName(name string) (*Schema, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	schema, ok := s.byName[name]
	return schema, ok
}

// Writer returns the writer schema of a single-object encoded value.
func (s *Store) Writer(value []byte) (*Schema, error) {
	if len(value) < 10 || !bytes.Equal(value[:2], Marker) {
		return nil, errors.New("not an Avro single-object encoding (no C3 01 marker)")
	}
	var fp [8]byte
	copy(fp[:], value[2:10])
	s.mu.RLock()
	defer s.mu.RUnlock()
	schema, ok := s.byFP[fp]
	if !ok {
		return nil, fmt.Errorf("%w: fingerprint %x", ErrUnknownSchema, fp)
	}
	return schema, nil
}

// Decode reads a value with its writer schema into out (a pointer: a struct with
// avro tags, or *any for a generic value).
func (s *Store) Decode(value []byte, out any) (*Schema, error) {
	writer, err := s.Writer(value)
	if err != nil {
		return nil, err
	}
	if err := avro.Unmarshal(writer.Avro, value[10:], out); err != nil {
		return writer, fmt.Errorf("%s: %w", writer.FullName(), err)
	}
	return writer, nil
}

// DecodeAs reads a value written with any known schema into the reader schema, by
// Avro's schema resolution (a newer reader reads older records).
func (s *Store) DecodeAs(value []byte, reader *Schema, out any) error {
	writer, err := s.Writer(value)
	if err != nil {
		return err
	}
	schema := reader.Avro
	if writer.Fingerprint != reader.Fingerprint {
		schema, err = avro.NewSchemaCompatibility().Resolve(reader.Avro, writer.Avro)
		if err != nil {
			return fmt.Errorf("%s cannot be read as %s: %w", writer.FullName(), reader.FullName(), err)
		}
	}
	return avro.Unmarshal(schema, value[10:], out)
}

// Encode writes v as a single-object encoding with schema.
func Encode(schema *Schema, v any) ([]byte, error) {
	body, err := avro.Marshal(schema.Avro, v)
	if err != nil {
		return nil, fmt.Errorf("value does not match %s: %w", schema.FullName(), err)
	}
	out := make([]byte, 0, 10+len(body))
	out = append(out, Marker...)
	out = append(out, schema.Fingerprint[:]...)
	return append(out, body...), nil
}

// CanonicalForm is the schema's Parsing Canonical Form (what the fingerprint hashes).
func CanonicalForm(schema avro.Schema) string { return schema.String() }

// fingerprint is CRC-64-AVRO of the Parsing Canonical Form, little-endian.
func fingerprint(schema avro.Schema) [8]byte {
	var out [8]byte
	binary.LittleEndian.PutUint64(out[:], crc64Avro([]byte(CanonicalForm(schema))))
	return out
}

const emptyFingerprint = 0xc15d213aa4d7a795

var crcTable = func() (t [256]uint64) {
	for i := range t {
		fp := uint64(i)
		for j := 0; j < 8; j++ {
			fp = (fp >> 1) ^ (emptyFingerprint & -(fp & 1))
		}
		t[i] = fp
	}
	return
}()

func crc64Avro(data []byte) uint64 {
	fp := uint64(emptyFingerprint)
	for _, b := range data {
		fp = (fp >> 8) ^ crcTable[byte(fp)^b]
	}
	return fp
}
