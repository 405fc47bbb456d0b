// LayerNorm family, fp32: y[r, c] = (x[r, c] - mean_r) / sqrt(var_r + 1e-5) * w[c] + b[c],
// var_r the biased variance of row r.
//
// Knobs (the variant's #define lines come before this text):
//   MAP_warp      one warp per row, BLOCK/32 warps per block, shuffle reductions
//   MAP_block     one block per row, shuffles plus one shared word per warp (and statistic)
//   ALGO_two      three passes over x in global memory: the mean, then the centred squares
//                 (an exact two-pass variance), then normalise and write
//   ALGO_welford  one pass for both statistics: each thread runs Welford's update per element,
//                 partial (count, mean, M2) triples are merged with Chan's formula; then write
//   ALGO_sumsq    one pass for sum and sum of squares, var = E[x^2] - mean^2 (clamped at 0);
//                 then write. This loses accuracy when |mean| >> std (cancellation); the inputs
//                 are normal(0, 1), where E[x^2] ~ 1 and mean^2 ~ 1/C, so nothing is lost here
//   ALGO_cached   each thread keeps ITEMS vectors of its row in registers, so a row that fits
//                 (C <= lanes*ITEMS*VEC) is read once and both statistics are the exact two-pass
//                 ones over registers; the rest of a longer row is read again in each pass
//   ALGO_smem     (MAP_block) the row is staged once in dynamic shared memory (C floats) while
//                 the mean is summed; variance and output passes read shared memory
//   ROWS          rows that one warp (MAP_warp) or one block (MAP_block) handles in turn
//   BLOCK         threads per block
//   VEC           floats per load and store (1, 2, 4); needs C % VEC == 0
//   ITEMS         loads in flight per thread per step (two, welford, sumsq, smem), or the
//                 register cache depth in vectors (cached)
//   SCALE_rsqrt   rsqrtf(var + eps);  SCALE_div  1.0f / sqrtf(var + eps)
//
// Every thread reads and writes only its own elements of a row (also in shared memory), so the
// only synchronisation is inside the block reductions; their loops are uniform across the block.

#define EPS 1e-5f

#if VEC == 4
typedef float4 vec_t;
#elif VEC == 2
typedef float2 vec_t;
#else
typedef float vec_t;
#endif

// Per-vector helpers, overloaded on the vector type: sum, sum of squares, sum of squares about m,
// Welford updates, and the output (v - m) * s * g + h.
__device__ __forceinline__ float vsum(float v) { return v; }
__device__ __forceinline__ float vsum(float2 v) { return v.x + v.y; }
__device__ __forceinline__ float vsum(float4 v) { return (v.x + v.y) + (v.z + v.w); }

__device__ __forceinline__ float vsq(float v) { return v * v; }
__device__ __forceinline__ float vsq(float2 v) { return v.x * v.x + v.y * v.y; }
__device__ __forceinline__ float vsq(float4 v) { return (v.x * v.x + v.y * v.y) + (v.z * v.z + v.w * v.w); }

__device__ __forceinline__ float vsqd(float v, float m) { return vsq(v - m); }
__device__ __forceinline__ float vsqd(float2 v, float m) { return vsq(make_float2(v.x - m, v.y - m)); }
__device__ __forceinline__ float vsqd(float4 v, float m)
{
    return vsq(make_float4(v.x - m, v.y - m, v.z - m, v.w - m));
}

__device__ __forceinline__ float nout(float v, float m, float s, float g, float h) { return fmaf((v - m) * s, g, h); }
__device__ __forceinline__ float vout(float v, float m, float s, float g, float h) { return nout(v, m, s, g, h); }
__device__ __forceinline__ float2 vout(float2 v, float m, float s, float2 g, float2 h)
{
    return make_float2(nout(v.x, m, s, g.x, h.x), nout(v.y, m, s, g.y, h.y));
}
__device__ __forceinline__ float4 vout(float4 v, float m, float s, float4 g, float4 h)
{
    return make_float4(nout(v.x, m, s, g.x, h.x), nout(v.y, m, s, g.y, h.y),
                       nout(v.z, m, s, g.z, h.z), nout(v.w, m, s, g.w, h.w));
}

// Welford's update with one element: count n, running mean m, sum of squared deviations m2.
__device__ __forceinline__ void welford_add(float& n, float& m, float& m2, float v)
{
    n += 1.0f;
    const float d = v - m;
    m += d / n;
    m2 += d * (v - m);
}
__device__ __forceinline__ void welford_add(float& n, float& m, float& m2, float2 v)
{
    welford_add(n, m, m2, v.x);
    welford_add(n, m, m2, v.y);
}
__device__ __forceinline__ void welford_add(float& n, float& m, float& m2, float4 v)
{
    welford_add(n, m, m2, v.x);
    welford_add(n, m, m2, v.y);
    welford_add(n, m, m2, v.z);
    welford_add(n, m, m2, v.w);
}

// Chan's merge of (n, m, m2) with (nb, mb, m2b). Empty partials (n = 0: lanes past the end of a
// narrow row) merge as the identity. Written symmetrically, with __fmul_rn so that no product is
// contracted into an FMA, so the two lanes of a butterfly step get bitwise the same result and
// every lane ends with the same statistics.
__device__ __forceinline__ void welford_merge(float& n, float& m, float& m2, float nb, float mb, float m2b)
{
    const float nab = n + nb;
    const float inv = nab > 0.0f ? 1.0f / nab : 0.0f;
    const float d = mb - m;
    m2 = (m2 + m2b) + __fmul_rn(__fmul_rn(d, d), __fmul_rn(n, nb)) * inv;
    m = (__fmul_rn(n, m) + __fmul_rn(nb, mb)) * inv;
    n = nab;
}

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

__device__ __forceinline__ void warp_welford(float& n, float& m, float& m2)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float nb = __shfl_xor_sync(0xffffffffu, n, o);
        const float mb = __shfl_xor_sync(0xffffffffu, m, o);
        const float m2b = __shfl_xor_sync(0xffffffffu, m2, o);
        welford_merge(n, m, m2, nb, mb, m2b);
    }
}

#if defined(MAP_block)
#define NWARPS (BLOCK / 32)
// Block reductions: shuffles within each warp, one shared word per warp and statistic, then every
// warp reduces those words itself, so all threads get the result without a third barrier. The
// first barrier keeps a call from overwriting words that the previous call is still reading.
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

__device__ __forceinline__ void row_sum2(float& a, float& b)
{
    __shared__ float red[2][32];
    a = warp_sum(a);
    b = warp_sum(b);
    if (NWARPS == 1) return;
    __syncthreads();
    if (threadIdx.x % 32 == 0) {
        red[0][threadIdx.x / 32] = a;
        red[1][threadIdx.x / 32] = b;
    }
    __syncthreads();
    const int l = threadIdx.x % 32;
    a = warp_sum(l < NWARPS ? red[0][l] : 0.0f);
    b = warp_sum(l < NWARPS ? red[1][l] : 0.0f);
}

__device__ __forceinline__ void row_welford(float& n, float& m, float& m2)
{
    __shared__ float red[3][32];
    warp_welford(n, m, m2);
    if (NWARPS == 1) return;
    __syncthreads();
    if (threadIdx.x % 32 == 0) {
        red[0][threadIdx.x / 32] = n;
        red[1][threadIdx.x / 32] = m;
        red[2][threadIdx.x / 32] = m2;
    }
    __syncthreads();
    const int l = threadIdx.x % 32;
    n = l < NWARPS ? red[0][l] : 0.0f;
    m = l < NWARPS ? red[1][l] : 0.0f;
    m2 = l < NWARPS ? red[2][l] : 0.0f;
    warp_welford(n, m, m2);
}
#else
#define row_sum warp_sum
__device__ __forceinline__ void row_sum2(float& a, float& b)
{
    a = warp_sum(a);
    b = warp_sum(b);
}
#define row_welford warp_welford
#endif

__device__ __forceinline__ float row_rstd(float var)
{
#if defined(SCALE_rsqrt)
    return rsqrtf(var + EPS);
#else
    return 1.0f / sqrtf(var + EPS);
#endif
}

extern "C" __global__ void __launch_bounds__(BLOCK)
layernorm_family(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                 float* __restrict__ y, int R, int C)
{
#if defined(MAP_warp)
    const int first = (blockIdx.x * (BLOCK / 32) + threadIdx.x / 32) * ROWS;
    const int lane = threadIdx.x % 32;
#else
    const int first = blockIdx.x * ROWS;
    const int lane = threadIdx.x;
#endif
    const int nv = C / VEC;
    const float fc = (float)C;
    const vec_t* wv = reinterpret_cast<const vec_t*>(w);
    const vec_t* bv = reinterpret_cast<const vec_t*>(b);
#if defined(ALGO_smem)
    extern __shared__ __align__(16) float row_smem[];
    vec_t* sr = reinterpret_cast<vec_t*>(row_smem);
#endif

    for (int row = first; row < first + ROWS && row < R; ++row) {
        const vec_t* xr = reinterpret_cast<const vec_t*>(x + (size_t)row * C);
        vec_t* yr = reinterpret_cast<vec_t*>(y + (size_t)row * C);
        float mean, var;

#if defined(ALGO_two) || defined(ALGO_smem)
        // Pass 1: the sum (smem: and the row into shared memory).
        float s = 0.0f;
        for (int base = lane; base < nv; base += STEP) {
            vec_t v[ITEMS];
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (base + i * LANES < nv) v[i] = xr[base + i * LANES];
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (base + i * LANES < nv) {
                    s += vsum(v[i]);
#if defined(ALGO_smem)
                    sr[base + i * LANES] = v[i];
#endif
                }
        }
        mean = row_sum(s) / fc;
        // Pass 2: the centred squares, from global memory again (two) or shared memory (smem).
        float q = 0.0f;
        for (int base = lane; base < nv; base += STEP) {
            vec_t v[ITEMS];
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (base + i * LANES < nv) {
#if defined(ALGO_smem)
                    v[i] = sr[base + i * LANES];
#else
                    v[i] = xr[base + i * LANES];
#endif
                }
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (base + i * LANES < nv) q += vsqd(v[i], mean);
        }
        var = row_sum(q) / fc;

#elif defined(ALGO_sumsq)
        float s = 0.0f, q = 0.0f;
        for (int base = lane; base < nv; base += STEP) {
            vec_t v[ITEMS];
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (base + i * LANES < nv) v[i] = xr[base + i * LANES];
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (base + i * LANES < nv) {
                    s += vsum(v[i]);
                    q += vsq(v[i]);
                }
        }
        row_sum2(s, q);
        mean = s / fc;
        var = fmaxf(q / fc - mean * mean, 0.0f);

#elif defined(ALGO_welford)
        float n = 0.0f, m = 0.0f, m2 = 0.0f;
        for (int base = lane; base < nv; base += STEP) {
            vec_t v[ITEMS];
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (base + i * LANES < nv) v[i] = xr[base + i * LANES];
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (base + i * LANES < nv) welford_add(n, m, m2, v[i]);
        }
        row_welford(n, m, m2);   // n is now C
        mean = m;
        var = m2 / fc;

#elif defined(ALGO_cached)
        vec_t cache[ITEMS];
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
            if (lane + i * LANES < nv) cache[i] = xr[lane + i * LANES];
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
            if (lane + i * LANES < nv) s += vsum(cache[i]);
        for (int j = lane + STEP; j < nv; j += LANES) s += vsum(xr[j]);
        mean = row_sum(s) / fc;
        float q = 0.0f;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
            if (lane + i * LANES < nv) q += vsqd(cache[i], mean);
        for (int j = lane + STEP; j < nv; j += LANES) q += vsqd(xr[j], mean);
        var = row_sum(q) / fc;
#endif

        const float rstd = row_rstd(var);

        // Output pass.
#if defined(ALGO_cached)
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
            if (lane + i * LANES < nv)
                yr[lane + i * LANES] = vout(cache[i], mean, rstd, wv[lane + i * LANES], bv[lane + i * LANES]);
        for (int j = lane + STEP; j < nv; j += LANES) yr[j] = vout(xr[j], mean, rstd, wv[j], bv[j]);
#else
        for (int base = lane; base < nv; base += STEP) {
            vec_t v[ITEMS], g[ITEMS], h[ITEMS];
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (base + i * LANES < nv) {
#if defined(ALGO_smem)
                    v[i] = sr[base + i * LANES];
#else
                    v[i] = xr[base + i * LANES];
#endif
                    g[i] = wv[base + i * LANES];
                    h[i] = bv[base + i * LANES];
                }
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (base + i * LANES < nv) yr[base + i * LANES] = vout(v[i], mean, rstd, g[i], h[i]);
        }
#endif
    }
}
