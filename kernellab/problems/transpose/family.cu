// Transpose family, fp32: out (C x R) = transpose(in (R x C)).
//
// Knobs (the variant's #define lines come before this text):
//   ALGO_naive_read   no shared memory; coalesced (vector) reads, scattered writes
//   ALGO_naive_write  no shared memory; scattered reads, coalesced (vector) writes
//   ALGO_smem         a TILE x TILE tile goes through shared memory: both sides coalesced
//   TILE              tile edge (16, 32, 64); the block is (TILE/VEC) x ROWS threads, each thread
//                     moving TILE/ROWS rows of VEC elements
//   ROWS              thread rows per block
//   VEC               floats per global load and store (1, 2, 4); when R or C is not a multiple
//                     of VEC the kernel takes its scalar path (any size works)
//   PADMODE_none      shared tile TILE x TILE (column reads conflict on banks)
//   PADMODE_pad       rows padded by one float
//   PADMODE_swizzle   column index XOR row index, no padding
//   TPB               tiles per block, walked along the rows of in

#define TX (TILE / VEC)
#define NTHREADS (TX * ROWS)

#if VEC == 4
typedef float4 vec_t;
#elif VEC == 2
typedef float2 vec_t;
#else
typedef float vec_t;
#endif

__device__ __forceinline__ float& lane_of(vec_t& v, int i) { return reinterpret_cast<float*>(&v)[i]; }

#if defined(ALGO_smem)
#if defined(PADMODE_pad)
#define TS(y, x) tile[(y) * (TILE + 1) + (x)]
#define TILE_FLOATS (TILE * (TILE + 1))
#elif defined(PADMODE_swizzle)
#define SWZ (TILE < 32 ? TILE : 32)
#define TS(y, x) tile[(y) * TILE + ((x) ^ ((y) % SWZ))]
#define TILE_FLOATS (TILE * TILE)
#else
#define TS(y, x) tile[(y) * TILE + (x)]
#define TILE_FLOATS (TILE * TILE)
#endif
#endif

extern "C" __global__ void __launch_bounds__(NTHREADS)
transpose_family(const float* __restrict__ in, float* __restrict__ out, int R, int C)
{
    const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
    const bool vec_ok = VEC == 1 || (R % VEC == 0 && C % VEC == 0);
    const int tile_c = blockIdx.x * TILE;
#if defined(ALGO_smem)
    __shared__ float tile[TILE_FLOATS];
#endif

    for (int t = 0; t < TPB; ++t) {
        const int tile_r = (blockIdx.y * TPB + t) * TILE;
        if (tile_r >= R) break;
#if defined(ALGO_smem)
        if (t > 0) __syncthreads();
#pragma unroll
        for (int y = ty; y < TILE; y += ROWS) {
            const int r = tile_r + y, c = tile_c + tx * VEC;
            if (r < R) {
                if (vec_ok) {
                    if (c < C) {
                        vec_t v = *reinterpret_cast<const vec_t*>(in + (size_t)r * C + c);
#pragma unroll
                        for (int i = 0; i < VEC; ++i) TS(y, tx * VEC + i) = lane_of(v, i);
                    }
                } else {
#pragma unroll
                    for (int i = 0; i < VEC; ++i)
                        if (c + i < C) TS(y, tx * VEC + i) = in[(size_t)r * C + c + i];
                }
            }
        }
        __syncthreads();
#pragma unroll
        for (int y = ty; y < TILE; y += ROWS) {
            const int orow = tile_c + y, ocol = tile_r + tx * VEC;
            if (orow < C) {
                if (vec_ok) {
                    if (ocol < R) {
                        vec_t v;
#pragma unroll
                        for (int i = 0; i < VEC; ++i) lane_of(v, i) = TS(tx * VEC + i, y);
                        *reinterpret_cast<vec_t*>(out + (size_t)orow * R + ocol) = v;
                    }
                } else {
#pragma unroll
                    for (int i = 0; i < VEC; ++i)
                        if (ocol + i < R) out[(size_t)orow * R + ocol + i] = TS(tx * VEC + i, y);
                }
            }
        }
#elif defined(ALGO_naive_read)
#pragma unroll
        for (int y = ty; y < TILE; y += ROWS) {
            const int r = tile_r + y, c = tile_c + tx * VEC;
            if (r < R) {
                if (vec_ok) {
                    if (c < C) {
                        vec_t v = *reinterpret_cast<const vec_t*>(in + (size_t)r * C + c);
#pragma unroll
                        for (int i = 0; i < VEC; ++i) out[(size_t)(c + i) * R + r] = lane_of(v, i);
                    }
                } else {
#pragma unroll
                    for (int i = 0; i < VEC; ++i)
                        if (c + i < C) out[(size_t)(c + i) * R + r] = in[(size_t)r * C + c + i];
                }
            }
        }
#elif defined(ALGO_naive_write)
        // Here the thread's x runs along a row of out (a column of in).
#pragma unroll
        for (int y = ty; y < TILE; y += ROWS) {
            const int orow = tile_c + y, ocol = tile_r + tx * VEC;
            if (orow < C) {
                if (vec_ok) {
                    if (ocol < R) {
                        vec_t v;
#pragma unroll
                        for (int i = 0; i < VEC; ++i) lane_of(v, i) = in[(size_t)(ocol + i) * C + orow];
                        *reinterpret_cast<vec_t*>(out + (size_t)orow * R + ocol) = v;
                    }
                } else {
#pragma unroll
                    for (int i = 0; i < VEC; ++i)
                        if (ocol + i < R) out[(size_t)orow * R + ocol + i] = in[(size_t)(ocol + i) * C + orow];
                }
            }
        }
#endif
    }
}
