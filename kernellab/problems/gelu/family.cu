// GELU, tanh form, over N floats: y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
//
// Knobs (the variant's #define lines come before this text):
//   MATH_tanhf    tanh by the CUDA math library's tanhf (accurate to a few ulp)
//   MATH_expf     tanh(u) = 1 - 2 / (1 + e^(2u)) with __expf and __fdividef (both approximate;
//                 e^(2u) = inf or a denominator past 2^126 gives 2/.. = 0, so tanh saturates at +-1)
//   MATH_approx   the hardware's tanh.approx.f32 (inline PTX, one MUFU.TANH, about 2^-11 relative)
//   CACHE_plain   plain loads and stores (the pointers are not __restrict__, so loads are LDG.E)
//   CACHE_ldg     loads through the read-only path (__ldg: LDG.E.CONSTANT), plain stores
//   CACHE_stream  streaming loads and stores (__ldcs / __stcs: evict-first, each byte is used once)
//   BLOCK         threads per block
//   VEC           elements per load and store (1: float, 2: float2, 4: float4); any N: the last
//                 N % VEC elements are a scalar tail that block 0 takes
//   ITEMS         vector loads per thread per tile, all issued before any is used (loads in flight)
//   GRID          0: one tile of BLOCK*ITEMS vectors per block; otherwise at most GRID blocks
//                 (a multiple of the 132 SMs) stride over the tiles (persistent grid)

#define TILE_VECS (BLOCK * ITEMS)

#if VEC == 4
typedef float4 vec_t;
#elif VEC == 2
typedef float2 vec_t;
#else
typedef float vec_t;
#endif

template <typename T>
__device__ __forceinline__ T load(const T* p)
{
#if defined(CACHE_ldg)
    return __ldg(p);
#elif defined(CACHE_stream)
    return __ldcs(p);
#else
    return *p;
#endif
}

template <typename T>
__device__ __forceinline__ void store(T* p, T v)
{
#if defined(CACHE_stream)
    __stcs(p, v);
#else
    *p = v;
#endif
}

__device__ __forceinline__ float tanh_of(float u)
{
#if defined(MATH_tanhf)
    return tanhf(u);
#elif defined(MATH_expf)
    return 1.0f - __fdividef(2.0f, 1.0f + __expf(2.0f * u));
#else
    float t;
    asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(u));
    return t;
#endif
}

__device__ __forceinline__ float gelu(float v)
{
    const float u = 0.7978845608f * v * (1.0f + 0.044715f * v * v);   // sqrt(2/pi) (v + 0.044715 v^3)
    return 0.5f * v * (1.0f + tanh_of(u));
}

__device__ __forceinline__ float gelu_vec(float v) { return gelu(v); }
__device__ __forceinline__ float2 gelu_vec(float2 v) { return make_float2(gelu(v.x), gelu(v.y)); }
__device__ __forceinline__ float4 gelu_vec(float4 v)
{
    return make_float4(gelu(v.x), gelu(v.y), gelu(v.z), gelu(v.w));
}

extern "C" __global__ void __launch_bounds__(BLOCK)
gelu_family(const float* x, float* y, int n)
{
    const vec_t* xv = reinterpret_cast<const vec_t*>(x);
    vec_t* yv = reinterpret_cast<vec_t*>(y);
    const long long nvec = n / VEC;
#if GRID == 0
    const long long tile = blockIdx.x;
    {
#else
    for (long long tile = blockIdx.x; tile * TILE_VECS < nvec; tile += gridDim.x) {
#endif
        const long long base = tile * TILE_VECS + threadIdx.x;
        if ((tile + 1) * TILE_VECS <= nvec) {
            // Whole tile: ITEMS coalesced loads (stride BLOCK vectors) in flight, then the math
            // and the stores.
            vec_t v[ITEMS];
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) v[i] = load(xv + base + (long long)i * BLOCK);
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) store(yv + base + (long long)i * BLOCK, gelu_vec(v[i]));
        } else {
            // The last, partial tile (with n < VEC, the single block's tile 0 holds no vector).
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) {
                const long long j = base + (long long)i * BLOCK;
                if (j < nvec) store(yv + j, gelu_vec(load(xv + j)));
            }
        }
    }
    // Scalar tail: the last n - nvec*VEC (< VEC) elements, one per thread of block 0.
    if (VEC > 1 && blockIdx.x == 0) {
        const long long j = nvec * VEC + threadIdx.x;
        if (j < n) store(y + j, gelu(load(x + j)));
    }
}
