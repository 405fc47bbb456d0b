// RMSNorm family, fp32: y[r, c] = x[r, c] / sqrt(mean(x[r, :]^2) + 1e-6) * w[c].
//
// Knobs (the variant's #define lines come before this text):
//   MAP_warp      one warp per row, BLOCK/32 warps per block, shuffle reductions
//   MAP_block     one block per row, shuffles plus one shared word per warp
//   ALGO_two      two passes over x in global memory: sum of squares, then scale and write
//   ALGO_cached   each thread keeps ITEMS vectors of its row in registers, so a row that fits
//                 (C <= lanes*ITEMS*VEC) is read once; the rest of a longer row is read twice
//   ALGO_smem     (MAP_block) the row is staged once in dynamic shared memory (C floats)
//   ROWS          rows that one warp (MAP_warp) or one block (MAP_block) handles in turn
//   BLOCK, VEC (1, 2, 4; needs C % VEC == 0), ITEMS (loads in flight, or register cache depth)
//   SCALE_rsqrt   rsqrtf(mean + eps);  SCALE_div  1.0f / sqrtf(mean + eps)

#define EPS 1e-6f

#if VEC == 4
typedef float4 vec_t;
#define VSQ(v) (((v).x * (v).x + (v).y * (v).y) + ((v).z * (v).z + (v).w * (v).w))
#define VOUT(v, g, s) make_float4((v).x * (s) * (g).x, (v).y * (s) * (g).y, (v).z * (s) * (g).z, (v).w * (s) * (g).w)
#elif VEC == 2
typedef float2 vec_t;
#define VSQ(v) ((v).x * (v).x + (v).y * (v).y)
#define VOUT(v, g, s) make_float2((v).x * (s) * (g).x, (v).y * (s) * (g).y)
#else
typedef float vec_t;
#define VSQ(v) ((v) * (v))
#define VOUT(v, g, s) ((v) * (s) * (g))
#endif

#if defined(MAP_warp)
#define LANES 32
#else
#define LANES BLOCK
#endif
#define STEP (LANES * ITEMS)

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

#if defined(MAP_block)
#define NWARPS (BLOCK / 32)
__device__ __forceinline__ float row_sum(float v)
{
    __shared__ float red[32];
    v = warp_sum(v);
    if (NWARPS == 1) return v;
    __syncthreads();
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    return warp_sum(threadIdx.x % 32 < NWARPS ? red[threadIdx.x % 32] : 0.0f);
}
#else
#define row_sum warp_sum
#endif

__device__ __forceinline__ float row_scale(float sumsq, int C)
{
#if defined(SCALE_rsqrt)
    return rsqrtf(sumsq / C + EPS);
#else
    return 1.0f / sqrtf(sumsq / C + EPS);
#endif
}

extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm_family(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int R, int C)
{
#if defined(MAP_warp)
    const int first = (blockIdx.x * (BLOCK / 32) + threadIdx.x / 32) * ROWS;
    const int lane = threadIdx.x % 32;
#else
    const int first = blockIdx.x * ROWS;
    const int lane = threadIdx.x;
#endif
    const int nv = C / VEC;
    const vec_t* wv = reinterpret_cast<const vec_t*>(w);
#if defined(ALGO_smem)
    extern __shared__ __align__(16) float row_smem[];
    vec_t* sr = reinterpret_cast<vec_t*>(row_smem);
#endif

    for (int row = first; row < first + ROWS && row < R; ++row) {
        const vec_t* xr = reinterpret_cast<const vec_t*>(x + (size_t)row * C);
        vec_t* yr = reinterpret_cast<vec_t*>(y + (size_t)row * C);
#if defined(ALGO_two) || defined(ALGO_smem)
        float ss = 0.0f;
        for (int base = lane; base < nv; base += STEP) {
            vec_t v[ITEMS];
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (base + i * LANES < nv) v[i] = xr[base + i * LANES];
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (base + i * LANES < nv) {
                    ss += VSQ(v[i]);
#if defined(ALGO_smem)
                    sr[base + i * LANES] = v[i];
#endif
                }
        }
        const float scale = row_scale(row_sum(ss), C);
        for (int base = lane; base < nv; base += STEP) {
            vec_t v[ITEMS], g[ITEMS];
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (base + i * LANES < nv) {
#if defined(ALGO_smem)
                    v[i] = sr[base + i * LANES];
#else
                    v[i] = xr[base + i * LANES];
#endif
                    g[i] = wv[base + i * LANES];
                }
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (base + i * LANES < nv) yr[base + i * LANES] = VOUT(v[i], g[i], scale);
        }
#elif defined(ALGO_cached)
        vec_t cache[ITEMS];
        float ss = 0.0f;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
            if (lane + i * LANES < nv) cache[i] = xr[lane + i * LANES];
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
            if (lane + i * LANES < nv) ss += VSQ(cache[i]);
        for (int j = lane + STEP; j < nv; j += LANES) ss += VSQ(xr[j]);
        const float scale = row_scale(row_sum(ss), C);
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
            if (lane + i * LANES < nv) yr[lane + i * LANES] = VOUT(cache[i], wv[lane + i * LANES], scale);
        for (int j = lane + STEP; j < nv; j += LANES) yr[j] = VOUT(xr[j], wv[j], scale);
#endif
    }
}
