/** trialog.Tensor (docs/interop.md, "Tensors"): dtype, shape, C-order little-endian bytes. */
export interface Tensor { dtype: string; shape: bigint[]; data: Buffer }

const READERS: Record<string, [number, (b: Buffer, i: number) => number]> = {
  bool: [1, (b, i) => b.readUInt8(i)], uint8: [1, (b, i) => b.readUInt8(i)], int8: [1, (b, i) => b.readInt8(i)],
  int16: [2, (b, i) => b.readInt16LE(i)], uint16: [2, (b, i) => b.readUInt16LE(i)],
  int32: [4, (b, i) => b.readInt32LE(i)], uint32: [4, (b, i) => b.readUInt32LE(i)], float32: [4, (b, i) => b.readFloatLE(i)],
  int64: [8, (b, i) => Number(b.readBigInt64LE(i))], uint64: [8, (b, i) => Number(b.readBigUInt64LE(i))], float64: [8, (b, i) => b.readDoubleLE(i)],
};

/** The elements as numbers (real dtypes except float16). */
export function tensorValues(t: Tensor): number[] {
  const reader = READERS[t.dtype];
  if (!reader) throw new Error(`dtype ${t.dtype} not supported by tensorValues`);
  const [size, read] = reader;
  if (t.data.length % size !== 0) throw new Error(`${t.data.length} bytes are not whole ${t.dtype} elements`);
  return Array.from({ length: t.data.length / size }, (_, k) => read(t.data, k * size));
}
