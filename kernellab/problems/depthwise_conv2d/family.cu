// Depthwise 2D convolution family, fp32: out[c] (H x W) = in[c] (H x W) (*) w[c] (3 x 3) for each of C
// channels, zero outside each image. Memory-bound: 9 multiply-adds for 8 bytes of traffic an output at best.
//
// Knobs (the variant's #define lines come before this text):
//   ALGO_direct   every tap is a load through the read-only cache
//   ALGO_smem     the block stages its tile plus a 1-wide halo in shared memory, then reads taps there
//   BX, BY        block shape (threads across, threads down); a block covers one channel (blockIdx.z)
//   OX            outputs per thread across, BX columns apart (so a warp's columns stay contiguous)
//   OY            outputs per thread down, in adjacent rows: each input row is loaded once and used
//                 for every output row it touches (up to three)
//   EDGE_check    every tap is bounds-checked
//   EDGE_split    blocks whose inputs lie inside the image take a path without checks
// The channel's 9 weights are loaded into registers once per thread.

#define R 1
#define TAPS 3
#define TILE_W (BX * OX)
#define TILE_H (BY * OY)
#define SM_W (TILE_W + 2 * R)
#define SM_H (TILE_H + 2 * R)

template <bool CHECK>
__device__ __forceinline__ float tap(const float* __restrict__ in, int r, int c, int H, int W)
{
    if (CHECK) return (r >= 0 && r < H && c >= 0 && c < W) ? __ldg(in + (size_t)r * W + c) : 0.0f;
    return __ldg(in + (size_t)r * W + c);
}

template <bool CHECK>
__device__ __forceinline__ void dw_block(const float* __restrict__ in, const float (&wr)[TAPS * TAPS],
                                         float* __restrict__ out, int H, int W, int row0, int col0,
                                         float (*tile)[SM_W])
{
    const int tx = threadIdx.x, ty = threadIdx.y;
    // This thread's outputs: rows orow + o (o < OY), columns ocol + e * BX (e < OX).
    const int orow = row0 + ty * OY, ocol = col0 + tx;
#if defined(ALGO_smem)
    for (int i = ty * BX + tx; i < SM_H * SM_W; i += BX * BY) {
        const int r = i / SM_W, c = i % SM_W;
        tile[r][c] = tap<CHECK>(in, row0 + r - R, col0 + c - R, H, W);
    }
    __syncthreads();
#define TAP(ir, e, b) tile[ty * OY + (ir)][tx + (e) * BX + (b)]
#else
#define TAP(ir, e, b) tap<CHECK>(in, orow + (ir) - R, ocol + (e) * BX + (b) - R, H, W)
#endif
    float acc[OY][OX];
#pragma unroll
    for (int o = 0; o < OY; ++o)
#pragma unroll
        for (int e = 0; e < OX; ++e) acc[o][e] = 0.0f;

    // Input row ir (0 .. OY + 1) feeds output rows o with 0 <= ir - o < 3.
#pragma unroll
    for (int ir = 0; ir < OY + 2 * R; ++ir) {
#pragma unroll
        for (int e = 0; e < OX; ++e) {
            float v[TAPS];
#pragma unroll
            for (int b = 0; b < TAPS; ++b) v[b] = TAP(ir, e, b);
#pragma unroll
            for (int o = 0; o < OY; ++o) {
                const int a = ir - o;
                if (a >= 0 && a < TAPS) {
#pragma unroll
                    for (int b = 0; b < TAPS; ++b) acc[o][e] += wr[a * TAPS + b] * v[b];
                }
            }
        }
    }
#undef TAP
#pragma unroll
    for (int o = 0; o < OY; ++o) {
#pragma unroll
        for (int e = 0; e < OX; ++e) {
            const int r = orow + o, c = ocol + e * BX;
            if (!CHECK || (r < H && c < W)) out[(size_t)r * W + c] = acc[o][e];
        }
    }
}

extern "C" __global__ void __launch_bounds__(BX * BY)
depthwise_family(const float* __restrict__ in, const float* __restrict__ w, float* __restrict__ out, int C, int H, int W)
{
    const int ch = blockIdx.z;
    float wr[TAPS * TAPS];
#pragma unroll
    for (int i = 0; i < TAPS * TAPS; ++i) wr[i] = __ldg(w + ch * TAPS * TAPS + i);
    in += (size_t)ch * H * W;
    out += (size_t)ch * H * W;
    const int row0 = blockIdx.y * TILE_H, col0 = blockIdx.x * TILE_W;
#if defined(ALGO_smem)
    __shared__ float tile[SM_H][SM_W];
#else
    float (*tile)[SM_W] = nullptr;
#endif
#if defined(EDGE_split)
    const bool inside = row0 >= R && col0 >= R && row0 + TILE_H + R <= H && col0 + TILE_W + R <= W;
    if (inside) {
        dw_block<false>(in, wr, out, H, W, row0, col0, tile);
        return;
    }
#endif
    dw_block<true>(in, wr, out, H, W, row0, col0, tile);
}
