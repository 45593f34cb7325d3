/** Packing of an outbox row's one or two containers into one column (u32 length + bytes, repeated). */
export function packBlobs(blobs: readonly Uint8Array[]): Uint8Array {
  let len = 0;
  for (const b of blobs) len += 4 + b.length;
  const out = new Uint8Array(len);
  const view = new DataView(out.buffer);
  let o = 0;
  for (const b of blobs) {
    view.setUint32(o, b.length);
    out.set(b, o + 4);
    o += 4 + b.length;
  }
  return out;
}

export function unpackBlobs(packed: Uint8Array): Uint8Array[] {
  const view = new DataView(packed.buffer, packed.byteOffset, packed.byteLength);
  const out: Uint8Array[] = [];
  let o = 0;
  while (o < packed.length) {
    const n = view.getUint32(o);
    out.push(packed.subarray(o + 4, o + 4 + n));
    o += 4 + n;
  }
  return out;
}
