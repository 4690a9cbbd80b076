package trialog

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Tensor is a decoded trialog.Tensor: a NumPy array's dtype, shape and C-order
// little-endian bytes (docs/interop.md, "Tensors").
type Tensor struct {
	Dtype string
	Shape []int64
	Data  []byte
}

// TensorOf reads a trialog.Tensor from a generically decoded value.
func TensorOf(v any) (Tensor, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return Tensor{}, fmt.Errorf("not a trialog.Tensor record: %T", v)
	}
	t := Tensor{}
	t.Dtype, _ = m["dtype"].(string)
	t.Data, _ = m["data"].([]byte)
	shape, _ := m["shape"].([]any)
	for _, d := range shape {
		n, _ := d.(int64)
		t.Shape = append(t.Shape, n)
	}
	return t, nil
}

var itemSize = map[string]int{"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "float16": 2, "int32": 4, "uint32": 4, "float32": 4, "int64": 8, "uint64": 8, "float64": 8}

// Float64s returns the elements as float64 (real dtypes; float16 is not needed by the examples).
func (t Tensor) Float64s() ([]float64, error) {
	size, ok := itemSize[t.Dtype]
	if !ok || t.Dtype == "float16" {
		return nil, fmt.Errorf("dtype %s not supported by Float64s", t.Dtype)
	}
	if len(t.Data)%size != 0 {
		return nil, fmt.Errorf("%d bytes are not whole %s elements", len(t.Data), t.Dtype)
	}
	out := make([]float64, len(t.Data)/size)
	for i := range out {
		b := t.Data[i*size : (i+1)*size]
		switch t.Dtype {
		case "bool", "uint8":
			out[i] = float64(b[0])
		case "int8":
			out[i] = float64(int8(b[0]))
		case "int16":
			out[i] = float64(int16(binary.LittleEndian.Uint16(b)))
		case "uint16":
			out[i] = float64(binary.LittleEndian.Uint16(b))
		case "int32":
			out[i] = float64(int32(binary.LittleEndian.Uint32(b)))
		case "uint32":
			out[i] = float64(binary.LittleEndian.Uint32(b))
		case "float32":
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
		case "int64":
			out[i] = float64(int64(binary.LittleEndian.Uint64(b)))
		case "uint64":
			out[i] = float64(binary.LittleEndian.Uint64(b))
		case "float64":
			out[i] = math.Float64frombits(binary.LittleEndian.Uint64(b))
		}
	}
	return out, nil
}
