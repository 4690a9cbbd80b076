package trialog

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"

	"github.com/hamba/avro/v2"
)

// The repository's schemas/ (tests run from sdk/go/trialog).
var schemasDir = filepath.Join("..", "..", "..", "schemas")

type manifest struct {
	Vectors []struct {
		Name              string          `json:"name"`
		File              string          `json:"file"`
		SchemaName        string          `json:"schema_name"`
		Schema            json.RawMessage `json:"schema"`
		Canonical         string          `json:"canonical"`
		Fingerprint       string          `json:"fingerprint"`
		Expected          json.RawMessage `json:"expected"`
		PayloadVector     string          `json:"payload_vector"`
		ReaderSchema      json.RawMessage `json:"reader_schema"`
		ReaderCanonical   string          `json:"reader_canonical"`
		ReaderFingerprint string          `json:"reader_fingerprint"`
		Kafka             json.RawMessage `json:"kafka"`
	} `json:"vectors"`
}

func readManifest(t *testing.T) manifest {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(schemasDir, "vectors", "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Vectors) == 0 {
		t.Fatal("manifest lists no vectors")
	}
	return m
}

func parseJSON(t *testing.T, raw json.RawMessage) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber() // longs beyond 2^53 stay exact
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestVectors decodes every vector with hamba/avro and compares it with the manifest's
// expected value; the evolution vector is read through its reader schema.
func TestVectors(t *testing.T) {
	builtin, err := LoadDir(schemasDir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, v := range readManifest(t).Vectors {
		v := v
		t.Run(v.Name, func(t *testing.T) {
			store := NewStore()
			writer, err := store.Register(string(v.Schema))
			if err != nil {
				t.Fatal(err)
			}
			if got := CanonicalForm(writer.Avro); got != v.Canonical {
				t.Fatalf("canonical form differs:\n go  %s\n want %s", got, v.Canonical)
			}
			if got := fmt.Sprintf("%x", writer.Fingerprint); got != v.Fingerprint {
				t.Fatalf("fingerprint %s, manifest %s", got, v.Fingerprint)
			}
			if _, err := builtin.Writer(append(append([]byte{}, Marker...), writer.Fingerprint[:]...)); err != nil && len(v.Kafka) > 0 {
				t.Fatalf("schemas/ (with schemas/previous) does not hold the writer schema of %s", v.Name)
			}
			value, err := os.ReadFile(filepath.Join(schemasDir, "vectors", v.File))
			if err != nil {
				t.Fatal(err)
			}
			files[v.Name] = value
			reader := writer
			if len(v.ReaderSchema) > 0 {
				if reader, err = store.Register(string(v.ReaderSchema)); err != nil {
					t.Fatal(err)
				}
				if got := fmt.Sprintf("%x", reader.Fingerprint); got != v.ReaderFingerprint {
					t.Fatalf("reader fingerprint %s, manifest %s", got, v.ReaderFingerprint)
				}
			}
			if known, ok := builtin.ByName(v.SchemaName); ok && known.Fingerprint != reader.Fingerprint {
				t.Fatalf("schemas/*.avsc gives %s another fingerprint than the vector's (reader) schema", v.SchemaName)
			}
			var decoded any
			if err := store.DecodeAs(value, reader, &decoded); err != nil {
				t.Fatal(err)
			}
			if err := compare(reader.Avro, decoded, parseJSON(t, v.Expected), "$"); err != nil {
				t.Fatal(err)
			}
			if v.PayloadVector != "" { // the nested payload is that vector's bytes
				payload := decoded.(map[string]any)["payload"].([]byte)
				want, err := os.ReadFile(filepath.Join(schemasDir, "vectors", v.PayloadVector+".bin"))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(payload, want) {
					t.Fatalf("payload differs from %s", v.PayloadVector)
				}
			}
		})
	}
}

// compare walks the schema: Avro's JSON conventions of the manifest (bytes base64,
// unions as {"branch": value}, non-finite floats as strings); a trialog.Tensor is
// compared by its fields (dtype, shape, data: the truth), the manifest's extra
// "values" being a reading aid.
func compare(schema avro.Schema, got, want any, path string) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...))
	}
	switch s := schema.(type) {
	case *avro.RefSchema:
		return compare(s.Schema(), got, want, path)
	case *avro.RecordSchema:
		g, ok1 := got.(map[string]any)
		w, ok2 := want.(map[string]any)
		if !ok1 || !ok2 {
			return fail("record: got %T, want %T", got, want)
		}
		for _, f := range s.Fields() {
			if err := compare(f.Type(), g[f.Name()], w[f.Name()], path+"."+f.Name()); err != nil {
				return err
			}
		}
		if len(g) != len(s.Fields()) {
			return fail("record has %d fields, schema %d", len(g), len(s.Fields()))
		}
		return nil
	case *avro.UnionSchema:
		if want == nil {
			if got != nil {
				return fail("want null, got %v", got)
			}
			return nil
		}
		w, ok := want.(map[string]any)
		if !ok || len(w) != 1 {
			return fail("union expected as {branch: value}, got %v", want)
		}
		for branch, wv := range w {
			for _, t := range s.Types() {
				if unionBranch(t) == branch {
					if g, ok := got.(map[string]any); ok && len(g) == 1 { // hamba's generic union
						gv, ok := g[branch]
						if !ok {
							return fail("union branch %v, want %s", keys(g), branch)
						}
						got = gv
					}
					return compare(t, got, wv, path+"<"+branch+">")
				}
			}
			return fail("no union branch %s", branch)
		}
	case *avro.ArraySchema:
		g, ok1 := got.([]any)
		w, ok2 := want.([]any)
		if !ok1 || !ok2 || len(g) != len(w) {
			return fail("array: got %v, want %v", got, want)
		}
		for i := range g {
			if err := compare(s.Items(), g[i], w[i], fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		return nil
	case *avro.MapSchema:
		g, ok1 := got.(map[string]any)
		w, ok2 := want.(map[string]any)
		if !ok1 || !ok2 || len(g) != len(w) {
			return fail("map: got %v, want %v", got, want)
		}
		for k := range w {
			if err := compare(s.Values(), g[k], w[k], path+"["+k+"]"); err != nil {
				return err
			}
		}
		return nil
	case *avro.EnumSchema:
		if got != want {
			return fail("enum %v, want %v", got, want)
		}
		return nil
	case *avro.FixedSchema:
		rv := reflect.ValueOf(got)
		if rv.Kind() != reflect.Array {
			return fail("fixed: got %T", got)
		}
		b := make([]byte, rv.Len())
		reflect.Copy(reflect.ValueOf(b), rv)
		return compareBytes(b, want, fail)
	case *avro.NullSchema:
		if got != nil || want != nil {
			return fail("null: got %v, want %v", got, want)
		}
		return nil
	case *avro.PrimitiveSchema:
		switch s.Type() {
		case avro.Boolean, avro.String:
			if got != want {
				return fail("got %v, want %v", got, want)
			}
		case avro.Int, avro.Long:
			n, ok := want.(json.Number)
			if !ok {
				return fail("want %v, not an integer", want)
			}
			w, err := strconv.ParseInt(string(n), 10, 64)
			if err != nil {
				return fail("%v", err)
			}
			if reflect.ValueOf(got).Int() != w {
				return fail("got %v, want %d", got, w)
			}
		case avro.Float, avro.Double:
			g := reflect.ValueOf(got).Float()
			var w float64
			switch x := want.(type) {
			case string:
				w = map[string]float64{"NaN": math.NaN(), "Infinity": math.Inf(1), "-Infinity": math.Inf(-1)}[x]
			case json.Number:
				w, _ = strconv.ParseFloat(string(x), 64)
			}
			if !(g == w || (math.IsNaN(g) && math.IsNaN(w))) || math.Signbit(g) != math.Signbit(w) {
				return fail("got %v, want %v", g, want)
			}
		case avro.Bytes:
			b, ok := got.([]byte)
			if !ok {
				return fail("bytes: got %T", got)
			}
			return compareBytes(b, want, fail)
		}
		return nil
	}
	return fail("schema type %T not handled", schema)
}

func compareBytes(got []byte, want any, fail func(string, ...any) error) error {
	w, err := base64.StdEncoding.DecodeString(fmt.Sprint(want))
	if err != nil {
		return fail("expected bytes are not base64: %v", err)
	}
	if !bytes.Equal(got, w) {
		return fail("bytes %x, want %x", got, w)
	}
	return nil
}

// unionBranch is the branch name of Avro's JSON encoding.
func unionBranch(s avro.Schema) string {
	if r, ok := s.(*avro.RefSchema); ok {
		s = r.Schema()
	}
	if n, ok := s.(avro.NamedSchema); ok {
		return n.FullName()
	}
	return string(s.Type())
}

func keys(m map[string]any) []string {
	out := []string{}
	for k := range m {
		out = append(out, k)
	}
	return out
}
