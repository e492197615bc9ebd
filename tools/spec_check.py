#!/usr/bin/env python3
"""An independent reading of docs/SPEC.md sections 3.1, 3.2 and 4, in Python.

Reads the vectors printed by `cargo run --example spec_vectors` on stdin, recomputes each one from the
spec's formulas (written here from the text, sharing no code with the crate) and reports mismatches.
Exit status 1 on any mismatch.
"""
import sys

M32 = 0xFFFFFFFF
M0, M1, W0, W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85


def philox4x32(c, k, rounds=10):
    c = list(c)
    k0, k1 = k
    for rnd in range(rounds):
        if rnd > 0:
            k0, k1 = (k0 + W0) & M32, (k1 + W1) & M32
        p0, p1 = M0 * c[0], M1 * c[2]
        hi0, lo0, hi1, lo1 = p0 >> 32, p0 & M32, p1 >> 32, p1 & M32
        c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
    return c


def r16(seed, step, stream_word, slot, e):
    key = (seed & M32, seed >> 32)
    j, k = e & 15, (e >> 4) & 7
    block = (e >> 7) * 16 + j
    ctr = (block & M32, (block >> 32) | (slot << 16), step, stream_word)
    o = philox4x32(ctr, key)
    return (o[k >> 1] >> (16 * (k & 1))) & 0xFFFF


def is_nan(b):
    return (b & 0x7FFFFFFF) > 0x7F800000


def bf16(mode, b, r):
    if is_nan(b):
        return (b >> 16) | 0x0040
    if mode == "n":
        return (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    if mode == "s":
        return (b + r) >> 16
    return b >> 16


def magnitude(a, man, emin, mode, r):
    E, F = a >> 23, a & 0x7FFFFF
    sig, e = (F, -126) if E == 0 else (F | 0x800000, E - 127)
    shift = min(40, 23 - man + max(0, emin - e))
    q, rem = sig >> shift, sig & ((1 << shift) - 1)
    if mode == "n":
        half = 1 << (shift - 1)
        up = rem > half or (rem == half and q & 1 == 1)
    elif mode == "s":
        frac16 = rem >> (shift - 16) if shift >= 16 else rem << (16 - shift)
        up = frac16 + r >= 1 << 16
    else:
        up = False
    return ((max(e, emin) - emin) << man) + q + int(up)


def f16(mode, b, r):
    sign, a = (b >> 16) & 0x8000, b & 0x7FFFFFFF
    if a > 0x7F800000:
        return sign | 0x7E00 | ((a >> 13) & 0x3FF)
    if a == 0x7F800000:
        return sign | 0x7C00
    limit = 0x7BFF if mode == "z" else 0x7C00
    return sign | min(magnitude(a, 10, -14, mode, r), limit)


def main():
    passed = failed = 0
    for line in sys.stdin:
        f = line.split()
        if not f:
            continue
        if f[0] == "bits":
            seed, step, sw, slot = (int(x, 16) for x in f[1:5])
            want, got = r16(seed, step, sw, slot, int(f[5])), int(f[6], 16)
        else:
            b, r, got = int(f[2], 16), int(f[3], 16), int(f[4], 16)
            want = (bf16 if f[0] == "bf16" else f16)(f[1], b, r)
        if want == got:
            passed += 1
        else:
            failed += 1
            if failed <= 10:
                print(f"MISMATCH {line.strip()}: spec gives {want:x}")
    print(f"spec_check: {passed} passed, {failed} failed")
    sys.exit(1 if failed or not passed else 0)


if __name__ == "__main__":
    main()
