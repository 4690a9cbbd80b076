package trialog

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/hamba/avro/v2"
)

// FromJSON reads a JSON value (a class's default_action) as a value of schema, in the
// form the library decodes values to (a record a map[string]any, a long an int64, a union
// map[string]any{"<branch>": v}): it is converted, then encoded and decoded again.
func FromJSON(schema *Schema, text string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	var raw any
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	value, err := jsonToAvro(schema.Avro, raw)
	if err != nil {
		return nil, err
	}
	encoded, err := Encode(schema, value)
	if err != nil {
		return nil, err
	}
	var out any
	err = avro.Unmarshal(schema.Avro, encoded[10:], &out)
	return out, err
}

func jsonToAvro(s avro.Schema, v any) (any, error) {
	if ref, ok := s.(*avro.RefSchema); ok {
		s = ref.Schema()
	}
	switch s.Type() {
	case avro.Null:
		if v != nil {
			return nil, fmt.Errorf("%v is not null", v)
		}
		return nil, nil
	case avro.Boolean:
		if b, ok := v.(bool); ok {
			return b, nil
		}
	case avro.Int, avro.Long:
		if n, ok := v.(json.Number); ok {
			i, err := n.Int64()
			if err != nil {
				return nil, err
			}
			if s.Type() == avro.Int {
				return int(i), nil
			}
			return i, nil
		}
	case avro.Float, avro.Double:
		if n, ok := v.(json.Number); ok {
			f, err := n.Float64()
			if err != nil {
				return nil, err
			}
			if s.Type() == avro.Float {
				return float32(f), nil
			}
			return f, nil
		}
	case avro.String, avro.Enum:
		if str, ok := v.(string); ok {
			return str, nil
		}
	case avro.Bytes:
		if str, ok := v.(string); ok {
			return []byte(str), nil
		}
	case avro.Array:
		if items, ok := v.([]any); ok {
			out := make([]any, len(items))
			for i, x := range items {
				var err error
				if out[i], err = jsonToAvro(s.(*avro.ArraySchema).Items(), x); err != nil {
					return nil, err
				}
			}
			return out, nil
		}
	case avro.Map:
		if m, ok := v.(map[string]any); ok {
			out := make(map[string]any, len(m))
			for k, x := range m {
				var err error
				if out[k], err = jsonToAvro(s.(*avro.MapSchema).Values(), x); err != nil {
					return nil, err
				}
			}
			return out, nil
		}
	case avro.Record:
		if m, ok := v.(map[string]any); ok {
			out := map[string]any{}
			for _, f := range s.(*avro.RecordSchema).Fields() {
				x, present := m[f.Name()]
				if !present {
					if !f.HasDefault() {
						return nil, fmt.Errorf("field %s missing", f.Name())
					}
					out[f.Name()] = f.Default()
					continue
				}
				var err error
				if out[f.Name()], err = jsonToAvro(f.Type(), x); err != nil {
					return nil, fmt.Errorf("field %s: %w", f.Name(), err)
				}
			}
			return out, nil
		}
	case avro.Union:
		for _, branch := range s.(*avro.UnionSchema).Types() {
			if branch.Type() == avro.Null {
				if v == nil {
					return nil, nil
				}
				continue
			}
			if x, err := jsonToAvro(branch, v); err == nil {
				return map[string]any{unionName(branch): x}, nil
			}
		}
	}
	return nil, fmt.Errorf("%v is not a value of %s", v, s.Type())
}

func unionName(s avro.Schema) string {
	if ref, ok := s.(*avro.RefSchema); ok {
		s = ref.Schema()
	}
	if named, ok := s.(avro.NamedSchema); ok {
		return named.FullName()
	}
	return string(s.Type())
}
