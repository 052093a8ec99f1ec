/**
 * [Note: a state digest]
 * A 64-bit digest of a piece of state's bytes (as the i32 words `broadcastState` moves), for
 * telling whether two ranks already hold the same bits without sending them: two 32-bit lanes over
 * every word in order, of different construction so that a difference that cancels in one lane
 * does not in the other (MurmurHash3's body, and xxHash32's round), each finished with
 * MurmurHash3's avalanche and the length. Not a cryptographic hash: it detects accidental
 * differences (another seed, a rank that trained a step more, a bit flipped in a copy), with a
 * chance of missing one of about 2^-64; a member that wants to deceive the others has easier ways
 * than a collision. Some 1-2 ns a byte in JavaScript, so at GPT-2 size (495 MB) about a second,
 * against 200 s to broadcast the same bytes over a 20 Mbit/s home uplink.
 */
export function stateDigest(words: Int32Array): Int32Array {
  let a = 0x9747b28c;
  let b = 0x165667b1;
  const length = words.length;
  for (let i = 0; i < length; i++) {
    const w = words[i]!;
    let k = Math.imul(w, 0xcc9e2d51);
    k = (k << 15) | (k >>> 17);
    k = Math.imul(k, 0x1b873593);
    a ^= k;
    a = (a << 13) | (a >>> 19);
    a = (Math.imul(a, 5) + 0xe6546b64) | 0;
    b = (b + Math.imul(w, 0x85ebca77)) | 0;
    b = (b << 13) | (b >>> 19);
    b = Math.imul(b, 0x9e3779b1);
  }
  return Int32Array.of(avalanche(a ^ length), avalanche(b ^ Math.imul(length, 0x27d4eb2f)));
}

/** MurmurHash3's finalizer: every input bit reaches every output bit. */
function avalanche(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h | 0;
}
