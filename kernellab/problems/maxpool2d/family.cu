// 3 x 3 max pooling family, stride 2, padding 1, fp32: out[c] (ceil(H/2) x ceil(W/2)) from in[c] (H x W) for
// each of C channels, taps outside the image left out. Memory-bound: 5 bytes of traffic an input element at
// best (read once, a quarter written), and no arithmetic but comparisons.
//
// Knobs (the variant's #define lines come before this text):
//   ALGO_direct   every tap is a load through the cache (overlapping windows load shared taps again)
//   ALGO_smem     the block stages its input tile (2 TILE + 1 rows and columns) in shared memory, then
//                 reads taps there
//   BX, BY        block shape (threads across, threads down); a block covers one channel (blockIdx.z)
//   OX            outputs per thread across, BX columns apart (so a warp's outputs stay contiguous)
//   OY            outputs per thread down, in adjacent rows: the input row between two output rows is
//                 loaded once for both
//   LOAD_plain    plain loads; LOAD_ldg: through the read-only path (__ldg)
//   EDGE_check    every tap is bounds-checked
//   EDGE_split    blocks whose windows lie inside the image take a path without checks

#define TAPS 3
#define NEG_INF __int_as_float(0xff800000)  // -inf, without a header (NVRTC has none)
#define TILE_W (BX * OX)
#define TILE_H (BY * OY)
#define SM_W (2 * TILE_W + 1)
#define SM_H (2 * TILE_H + 1)

#if defined(LOAD_ldg)
#define LD(p) __ldg(p)
#else
#define LD(p) (*(p))
#endif

template <bool CHECK>
__device__ __forceinline__ float tap(const float* __restrict__ in, int r, int c, int H, int W)
{
    if (CHECK) return (r >= 0 && r < H && c >= 0 && c < W) ? LD(in + (size_t)r * W + c) : NEG_INF;
    return LD(in + (size_t)r * W + c);
}

template <bool CHECK>
__device__ __forceinline__ void pool_block(const float* __restrict__ in, float* __restrict__ out, int H, int W,
                                           int OH, int OW, int row0, int col0, float (*tile)[SM_W])
{
    const int tx = threadIdx.x, ty = threadIdx.y;
    // This thread's outputs: rows orow + o (o < OY), columns ocol + e * BX (e < OX). Output (r, c) reads
    // input rows 2r - 1 .. 2r + 1 and columns 2c - 1 .. 2c + 1.
    const int orow = row0 + ty * OY, ocol = col0 + tx;
#if defined(ALGO_smem)
    for (int i = ty * BX + tx; i < SM_H * SM_W; i += BX * BY) {
        const int r = i / SM_W, c = i % SM_W;
        tile[r][c] = tap<CHECK>(in, 2 * row0 - 1 + r, 2 * col0 - 1 + c, H, W);
    }
    __syncthreads();
#define TAP(ir, e, b) tile[2 * ty * OY + (ir)][2 * (tx + (e) * BX) + (b)]
#else
#define TAP(ir, e, b) tap<CHECK>(in, 2 * orow - 1 + (ir), 2 * (ocol + (e) * BX) - 1 + (b), H, W)
#endif
    float m[OY][OX];
#pragma unroll
    for (int o = 0; o < OY; ++o)
#pragma unroll
        for (int e = 0; e < OX; ++e) m[o][e] = NEG_INF;

    // Input row ir (0 .. 2 OY) feeds output rows o with 0 <= ir - 2 o < 3.
#pragma unroll
    for (int ir = 0; ir < 2 * OY + 1; ++ir) {
#pragma unroll
        for (int e = 0; e < OX; ++e) {
            float v = TAP(ir, e, 0);
#pragma unroll
            for (int b = 1; b < TAPS; ++b) v = fmaxf(v, TAP(ir, e, b));
#pragma unroll
            for (int o = 0; o < OY; ++o) {
                const int a = ir - 2 * o;
                if (a >= 0 && a < TAPS) m[o][e] = fmaxf(m[o][e], v);
            }
        }
    }
#undef TAP
#pragma unroll
    for (int o = 0; o < OY; ++o) {
#pragma unroll
        for (int e = 0; e < OX; ++e) {
            const int r = orow + o, c = ocol + e * BX;
            if (!CHECK || (r < OH && c < OW)) out[(size_t)r * OW + c] = m[o][e];
        }
    }
}

extern "C" __global__ void __launch_bounds__(BX * BY)
maxpool_family(const float* __restrict__ in, float* __restrict__ out, int C, int H, int W)
{
    const int OH = (H + 1) / 2, OW = (W + 1) / 2;
    const int ch = blockIdx.z;
    in += (size_t)ch * H * W;
    out += (size_t)ch * OH * OW;
    const int row0 = blockIdx.y * TILE_H, col0 = blockIdx.x * TILE_W;
#if defined(ALGO_smem)
    __shared__ float tile[SM_H][SM_W];
#else
    float (*tile)[SM_W] = nullptr;
#endif
#if defined(EDGE_split)
    // The block's windows read input rows 2 row0 - 1 .. 2 (row0 + TILE_H) - 1, and columns alike.
    const bool inside = row0 >= 1 && col0 >= 1 && 2 * (row0 + TILE_H) <= H && 2 * (col0 + TILE_W) <= W;
    if (inside) {
        pool_block<false>(in, out, H, W, OH, OW, row0, col0, tile);
        return;
    }
#endif
    pool_block<true>(in, out, H, W, OH, OW, row0, col0, tile);
}
