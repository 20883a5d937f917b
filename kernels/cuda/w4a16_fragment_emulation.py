#!/usr/bin/env python3
# Host emulation of w4a16_tensor_core_kernel (kernels/cuda/w4a16_tensor_core.cu): each thread's
# 128-bit loads, the nibble → fp16 trick, the byte permutes, and mma.sync.m16n8k16 executed by the
# fragment layouts of the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating point type"),
# compared with a plain reference. It checks the k-mapping and the output indexing without a GPU;
# it says nothing about timing or about the hardware's fp32 accumulation. Keep it in step with the
# kernel. Needs numpy:  python3 kernels/cuda/w4a16_fragment_emulation.py
import numpy as np
rng = np.random.default_rng(0)

def h2u(lo, hi):  # two float16 -> uint32 (lo in low 16 bits)
    a = np.array([lo, hi], dtype=np.float16).view(np.uint16)
    return int(a[0]) | (int(a[1]) << 16)
def u2h(u):
    return np.array([u & 0xffff, u >> 16], dtype=np.uint16).view(np.float16).astype(np.float64)
def byte_perm(x, y, s):
    b = [(x >> (8*i)) & 0xff for i in range(4)] + [(y >> (8*i)) & 0xff for i in range(4)]
    r = 0
    for i in range(4):
        r |= b[(s >> (4*i)) & 7] << (8*i)
    return r
def nibble_pair(word, p):
    biased = ((word >> (4*p)) & 0x000F000F) | 0x64006400
    lo, hi = u2h(biased)
    return h2u(lo - 1024.0, hi - 1024.0)

def mma(D, A_regs, B_regs):
    # D: [32][4] per-lane accumulators; A_regs: [32][4] uint32; B_regs: [32][2]
    A = np.zeros((16, 16)); B = np.zeros((16, 8))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        a = []
        for r in A_regs[lane]: a += list(u2h(r))
        for i in range(8):
            row = g if (i < 2 or 4 <= i < 6) else g + 8
            col = t*2 + (i & 1) + (8 if i >= 4 else 0)
            A[row, col] = a[i]
        b = []
        for r in B_regs[lane]: b += list(u2h(r))
        for i in range(4):
            row = t*2 + (i & 1) + (8 if i >= 2 else 0)
            B[row, g] = b[i]
    C = A @ B
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for i in range(4):
            row = g if i < 2 else g + 8
            col = t*2 + (i & 1)
            D[lane][i] += C[row, col]

def kernel(x, qw, scales, zeros, bias, M, N, K, gs, NT, kWarps=8):
    y = np.full((M, N), np.nan)
    row_bytes = K // 2; groups = -(-K // gs); steps = K // 128
    for bx in range(-(-N // 16)):
        for by in range(-(-M // (8*NT))):
            n0, m0 = bx*16, by*8*NT
            warp_acc = []
            for warp in range(kWarps):
                acc = [[[0.0]*4 for _ in range(32)] for _ in range(NT)]
                for step in range(warp, steps, kWarps):
                    p = [[[0.0]*4 for _ in range(32)] for _ in range(NT)]
                    xs = [[[0.0]*4 for _ in range(32)] for _ in range(NT)]
                    # per-lane loads
                    lane_w = []; lane_x = []; lane_sz = []
                    for lane in range(32):
                        g, t = lane >> 2, lane & 3
                        r0, r1 = min(n0+g, N-1), min(n0+g+8, N-1)
                        off = step*64 + t*16
                        w0 = np.frombuffer(qw[r0, off:off+16].tobytes(), dtype=np.uint32)
                        w1 = np.frombuffer(qw[r1, off:off+16].tobytes(), dtype=np.uint32)
                        xv = []
                        for j in range(NT):
                            tok = m0 + 8*j + g
                            if tok < M:
                                seg = x[tok, step*128 + t*32: step*128 + t*32 + 32]
                                xv.append(np.frombuffer(seg.astype(np.float16).tobytes(), dtype=np.uint32).reshape(4, 4))
                            else:
                                xv.append(np.zeros((4, 4), dtype=np.uint32))
                        grp = step*128 // gs
                        lane_w.append((w0, w1)); lane_x.append(xv)
                        lane_sz.append((scales[r0, grp], scales[r1, grp], zeros[r0, grp], zeros[r1, grp]))
                    for w in range(4):
                        af = [[nibble_pair(int(lane_w[l][0][w]), 0), nibble_pair(int(lane_w[l][1][w]), 0),
                               nibble_pair(int(lane_w[l][0][w]), 1), nibble_pair(int(lane_w[l][1][w]), 1)] for l in range(32)]
                        asec = [[nibble_pair(int(lane_w[l][0][w]), 2), nibble_pair(int(lane_w[l][1][w]), 2),
                                 nibble_pair(int(lane_w[l][0][w]), 3), nibble_pair(int(lane_w[l][1][w]), 3)] for l in range(32)]
                        ones = [[0x3C003C00]*4 for _ in range(32)]
                        for j in range(NT):
                            bf, bs = [], []
                            for l in range(32):
                                v = [int(u) for u in lane_x[l][j][w]]
                                bf.append([byte_perm(v[0], v[2], 0x5410), byte_perm(v[0], v[2], 0x7632)])
                                bs.append([byte_perm(v[1], v[3], 0x5410), byte_perm(v[1], v[3], 0x7632)])
                            mma(p[j], af, bf); mma(xs[j], ones, bf)
                            mma(p[j], asec, bs); mma(xs[j], ones, bs)
                    for j in range(NT):
                        for l in range(32):
                            sc0, sc1, z0, z1 = lane_sz[l]
                            acc[j][l][0] += sc0 * (p[j][l][0] - z0 * xs[j][l][0])
                            acc[j][l][1] += sc0 * (p[j][l][1] - z0 * xs[j][l][1])
                            acc[j][l][2] += sc1 * (p[j][l][2] - z1 * xs[j][l][2])
                            acc[j][l][3] += sc1 * (p[j][l][3] - z1 * xs[j][l][3])
                warp_acc.append(acc)
            for j in range(NT):
                for l in range(32):
                    g, t = l >> 2, l & 3
                    for i in range(4):
                        v = sum(warp_acc[w][j][l][i] for w in range(kWarps))
                        row = n0 + g + (8 if i >= 2 else 0)
                        tok = m0 + 8*j + 2*t + (i & 1)
                        if row < N and tok < M:
                            y[tok, row] = v + (bias[row] if bias is not None else 0)
    return y

def run(M, N, K, gs, NT):
    x = rng.standard_normal((M, K)).astype(np.float16).astype(np.float64)
    q = rng.integers(0, 16, (N, K))
    G = -(-K // gs)
    scales = rng.uniform(0.01, 0.1, (N, G)).astype(np.float32).astype(np.float64)
    zeros = rng.integers(-3000, 3000, (N, G)).astype(np.float64); zeros[:, 0] = rng.integers(0, 16, N)
    bias = rng.standard_normal(N)
    qw = (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8)
    W = (q - np.repeat(zeros, gs, axis=1)[:, :K]) * np.repeat(scales, gs, axis=1)[:, :K]
    ref = x @ W.T + bias
    got = kernel(x, qw, scales, zeros, bias, M, N, K, gs, NT)
    err = np.abs(got - ref).max() / np.abs(ref).max()
    print(f"M={M} N={N} K={K} g={gs} NT={NT}: max rel err {err:.2e}, nan {np.isnan(got).sum()}")
    assert err < 1e-9 and not np.isnan(got).any()

run(3, 20, 256, 128, 1)
run(11, 17, 384, 384, 2)
run(16, 32, 1152, 128, 2)
print("ok")
