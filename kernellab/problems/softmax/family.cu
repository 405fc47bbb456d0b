// Row softmax family, fp32: y[r, :] = exp(x[r, :] - max) / sum(exp(x[r, :] - max)).
//
// Knobs (the variant's #define lines come before this text):
//   MAP_warp      one warp per row, BLOCK/32 rows per block, reductions with shuffles only
//   MAP_block     one block per row, reductions with shuffles and one shared word per warp
//   ALGO_three    three passes over x in global memory: max, sum of exp, write
//   ALGO_online   two passes: running max and rescaled sum together (online softmax), then write
//   ALGO_cached   each thread keeps ITEMS vectors of its row in registers, so a row that fits
//                 (C <= lanes*ITEMS*VEC) is read from global memory once; the rest of a longer
//                 row is read again in each pass
//   ALGO_smem     (MAP_block) the row is staged once in dynamic shared memory (C floats)
//   BLOCK         threads per block
//   VEC           floats per load and store (1, 2, 4); needs C % VEC == 0
//   ITEMS         loads in flight per thread per step (three, online, smem), or the register
//                 cache depth in vectors (cached)
//   EXP_accurate  expf;  EXP_fast  __expf

#define NEG_BIG (-3.402823466e38f)

#if defined(EXP_fast)
#define EXPF(v) __expf(v)
#else
#define EXPF(v) expf(v)
#endif

#if VEC == 4
typedef float4 vec_t;
#define VMAX(v) fmaxf(fmaxf((v).x, (v).y), fmaxf((v).z, (v).w))
#define VEXPSUM(v, m) ((EXPF((v).x - (m)) + EXPF((v).y - (m))) + (EXPF((v).z - (m)) + EXPF((v).w - (m))))
#define VNORM(v, m, inv) make_float4(EXPF((v).x - (m)) * (inv), EXPF((v).y - (m)) * (inv), \
                                     EXPF((v).z - (m)) * (inv), EXPF((v).w - (m)) * (inv))
#elif VEC == 2
typedef float2 vec_t;
#define VMAX(v) fmaxf((v).x, (v).y)
#define VEXPSUM(v, m) (EXPF((v).x - (m)) + EXPF((v).y - (m)))
#define VNORM(v, m, inv) make_float2(EXPF((v).x - (m)) * (inv), EXPF((v).y - (m)) * (inv))
#else
typedef float vec_t;
#define VMAX(v) (v)
#define VEXPSUM(v, m) EXPF((v) - (m))
#define VNORM(v, m, inv) (EXPF((v) - (m)) * (inv))
#endif

#if defined(MAP_warp)
#define LANES 32
#else
#define LANES BLOCK
#endif
#define STEP (LANES * ITEMS)   // vectors of a row covered by one step of all lanes

__device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Combines running (max, sum-of-exp) pairs across the warp.
__device__ __forceinline__ void warp_online(float& m, float& s)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        const float mn = fmaxf(m, m2);
        s = s * EXPF(m - mn) + s2 * EXPF(m2 - mn);
        m = mn;
    }
}

#if defined(MAP_block)
#define NWARPS (BLOCK / 32)
// All-reductions over the block; the leading barrier lets the shared words be reused.
__device__ __forceinline__ float row_max(float v)
{
    __shared__ float red[32];
    v = warp_max(v);
    if (NWARPS == 1) return v;
    __syncthreads();
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    return warp_max(threadIdx.x % 32 < NWARPS ? red[threadIdx.x % 32] : NEG_BIG);
}
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
__device__ __forceinline__ void row_online(float& m, float& s)
{
    __shared__ float red_m[32], red_s[32];
    warp_online(m, s);
    if (NWARPS == 1) return;
    __syncthreads();
    if (threadIdx.x % 32 == 0) { red_m[threadIdx.x / 32] = m; red_s[threadIdx.x / 32] = s; }
    __syncthreads();
    const bool has = threadIdx.x % 32 < NWARPS;
    m = has ? red_m[threadIdx.x % 32] : NEG_BIG;
    s = has ? red_s[threadIdx.x % 32] : 0.0f;
    warp_online(m, s);
}
#else
#define row_max warp_max
#define row_sum warp_sum
#define row_online warp_online
#endif

extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_family(const float* __restrict__ x, float* __restrict__ y, int R, int C)
{
#if defined(MAP_warp)
    const int row = blockIdx.x * (BLOCK / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= R) return;
#else
    const int row = blockIdx.x;
    const int lane = threadIdx.x;
#endif
    const int nv = C / VEC;
    const vec_t* xr = reinterpret_cast<const vec_t*>(x + (size_t)row * C);
    vec_t* yr = reinterpret_cast<vec_t*>(y + (size_t)row * C);

#if defined(ALGO_three) || defined(ALGO_online)
    float m = NEG_BIG, s = 0.0f;
    for (int base = lane; base < nv; base += STEP) {
        vec_t v[ITEMS];
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
            if (base + i * LANES < nv) v[i] = xr[base + i * LANES];
        float cm = NEG_BIG;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
            if (base + i * LANES < nv) cm = fmaxf(cm, VMAX(v[i]));
#if defined(ALGO_three)
        m = fmaxf(m, cm);
#else
        const float mn = fmaxf(m, cm);
        float cs = 0.0f;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
            if (base + i * LANES < nv) cs += VEXPSUM(v[i], mn);
        s = s * EXPF(m - mn) + cs;
        m = mn;
#endif
    }
#if defined(ALGO_three)
    m = row_max(m);
    for (int base = lane; base < nv; base += STEP) {
        vec_t v[ITEMS];
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
            if (base + i * LANES < nv) v[i] = xr[base + i * LANES];
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
            if (base + i * LANES < nv) s += VEXPSUM(v[i], m);
    }
    s = row_sum(s);
#else
    row_online(m, s);
#endif
    const float inv = 1.0f / s;
    for (int base = lane; base < nv; base += STEP) {
        vec_t v[ITEMS];
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
            if (base + i * LANES < nv) v[i] = xr[base + i * LANES];
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
            if (base + i * LANES < nv) yr[base + i * LANES] = VNORM(v[i], m, inv);
    }

#elif defined(ALGO_cached)
    vec_t cache[ITEMS];
    float m = NEG_BIG;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i)
        if (lane + i * LANES < nv) cache[i] = xr[lane + i * LANES];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i)
        if (lane + i * LANES < nv) m = fmaxf(m, VMAX(cache[i]));
    for (int j = lane + STEP; j < nv; j += LANES) m = fmaxf(m, VMAX(xr[j]));
    m = row_max(m);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i)
        if (lane + i * LANES < nv) s += VEXPSUM(cache[i], m);
    for (int j = lane + STEP; j < nv; j += LANES) s += VEXPSUM(xr[j], m);
    s = row_sum(s);
    const float inv = 1.0f / s;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i)
        if (lane + i * LANES < nv) yr[lane + i * LANES] = VNORM(cache[i], m, inv);
    for (int j = lane + STEP; j < nv; j += LANES) yr[j] = VNORM(xr[j], m, inv);

#elif defined(ALGO_smem)
    extern __shared__ __align__(16) float row_smem[];
    vec_t* sr = reinterpret_cast<vec_t*>(row_smem);
    float m = NEG_BIG;
    for (int base = lane; base < nv; base += STEP) {
        vec_t v[ITEMS];
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
            if (base + i * LANES < nv) v[i] = xr[base + i * LANES];
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
            if (base + i * LANES < nv) { sr[base + i * LANES] = v[i]; m = fmaxf(m, VMAX(v[i])); }
    }
    m = row_max(m);
    float s = 0.0f;
    for (int j = lane; j < nv; j += LANES) s += VEXPSUM(sr[j], m);
    s = row_sum(s);
    const float inv = 1.0f / s;
    for (int j = lane; j < nv; j += LANES) yr[j] = VNORM(sr[j], m, inv);
#endif
}
