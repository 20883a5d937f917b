#!/usr/bin/env python3
"""Independent oracle for qeval's floating-point formats (issue 61; tests/quant/float_formats_test.cpp).

Element casts come from ml_dtypes (float8_e4m3fn, float8_e5m2, float6_e2m3fn, float6_e3m2fn,
float4_e2m1fn), fed float32 values only (ml_dtypes casts float64 through float32, rounding twice).
The scaling is written here from the format definitions in numpy float32:
  cast   DIR TYPE...           values.f32 -> <type>.codes      clamp to +-max, cast, the bits
  mx     DIR K TYPE RULE       mx_in.f32 [rows, K] -> mx_<type>_<rule>.exps (int8), .codes (uint8)
  nvfp4  DIR ROWS K            nvfp4_in.f32 [tensors, ROWS, K] -> nvfp4.scales (f32), nvfp4.codes (uint8)
The MX exponent floor(log2 amax) is taken exactly from np.frexp (ml_dtypes' E8M0 cast rounds to
the nearest power of two, not down).
"""
import os
import sys

import ml_dtypes
import numpy as np

DTYPES = {
    "e4m3": ml_dtypes.float8_e4m3fn,
    "e5m2": ml_dtypes.float8_e5m2,
    "e2m3": ml_dtypes.float6_e2m3fn,
    "e3m2": ml_dtypes.float6_e3m2fn,
    "e2m1": ml_dtypes.float4_e2m1fn,
}
EMAX = {"e4m3": 8, "e5m2": 15, "e2m3": 2, "e3m2": 4, "e2m1": 2}


def max_finite(t):
    return np.float32(ml_dtypes.finfo(DTYPES[t]).max)


def cast_codes(v32, t):
    """Clamp to +-max (float32), cast with ml_dtypes' round-to-nearest-even, return the bits."""
    m = max_finite(t)
    c = np.clip(v32, -m, m).astype(np.float32)
    return c.astype(DTYPES[t]).view(np.uint8)


def element_values(codes, t):
    return codes.view(DTYPES[t]).astype(np.float32)


def floor_log2(a):
    """Exact floor(log2 a) for positive finite float32 a (subnormals included)."""
    _, e = np.frexp(a.astype(np.float64))
    return e.astype(np.int64) - 1


def run_cast(d, types):
    v = np.fromfile(os.path.join(d, "values.f32"), dtype=np.float32)
    for t in types:
        cast_codes(v, t).tofile(os.path.join(d, t + ".codes"))


def run_mx(d, K, t, rule):
    x = np.fromfile(os.path.join(d, "mx_in.f32"), dtype=np.float32).reshape(-1, K)
    rows = x.shape[0]
    nblocks = (K + 31) // 32
    exps = np.zeros((rows, nblocks), dtype=np.int8)
    codes = np.zeros((rows, K), dtype=np.uint8)
    m = max_finite(t)
    for b in range(nblocks):
        blk = x[:, b * 32:(b + 1) * 32]
        amax = np.abs(blk).max(axis=1)
        nz = amax > 0
        s = np.full(rows, -127, dtype=np.int64)
        s[nz] = floor_log2(amax[nz]) - EMAX[t]
        if rule == "up":
            # the smallest s with max * 2^s >= amax
            bump = nz & (amax.astype(np.float64) > np.ldexp(np.float64(m), s))
            s[bump] += 1
        s = np.clip(s, -127, 127)
        scale = np.ldexp(np.float32(1), s.astype(np.int32)).astype(np.float32)  # 2^-127: a float32 subnormal
        q = (blk / scale[:, None]).astype(np.float32)
        c = cast_codes(q, t)
        c[~nz, :] = 0
        exps[:, b] = s.astype(np.int8)
        codes[:, b * 32:(b + 1) * 32] = c
    exps.tofile(os.path.join(d, "mx_%s_%s.exps" % (t, rule)))
    codes.tofile(os.path.join(d, "mx_%s_%s.codes" % (t, rule)))


def run_nvfp4(d, R, K):
    x = np.fromfile(os.path.join(d, "nvfp4_in.f32"), dtype=np.float32).reshape(-1, R, K)
    nb = (K + 15) // 16
    scales = np.zeros((x.shape[0], R, nb), dtype=np.float32)
    codes = np.zeros(x.shape, dtype=np.uint8)
    for i in range(x.shape[0]):
        amax_t = np.float32(np.abs(x[i]).max())
        s_t = np.float32(amax_t / np.float32(448.0 * 6.0))
        if s_t == 0:
            continue
        t = np.float32(np.float32(6.0) * s_t)
        for b in range(nb):
            blk = x[i, :, b * 16:(b + 1) * 16]
            amax_b = np.abs(blk).max(axis=1).astype(np.float32)
            s_b = element_values(cast_codes((amax_b / t).astype(np.float32), "e4m3"), "e4m3")
            p = (s_b * s_t).astype(np.float32)
            ok = p != 0
            q = np.zeros_like(blk)
            q[ok] = (blk[ok] / p[ok, None]).astype(np.float32)
            c = cast_codes(q, "e2m1")
            c[~ok, :] = 0
            scales[i, :, b] = s_b
            codes[i, :, b * 16:(b + 1) * 16] = c
    scales.tofile(os.path.join(d, "nvfp4.scales"))
    codes.tofile(os.path.join(d, "nvfp4.codes"))


def main(argv):
    mode, d = argv[1], argv[2]
    if mode == "cast":
        run_cast(d, argv[3:])
    elif mode == "mx":
        run_mx(d, int(argv[3]), argv[4], argv[5])
    elif mode == "nvfp4":
        run_nvfp4(d, int(argv[3]), int(argv[4]))
    else:
        sys.exit("unknown mode " + mode)


if __name__ == "__main__":
    with np.errstate(all="ignore"):
        main(sys.argv)
