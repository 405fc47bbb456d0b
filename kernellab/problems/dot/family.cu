// Dot product of two N-float vectors: out[0] = sum of x[i] * y[i].
//
// Knobs (the variant's #define lines come before this text):
//   ALGO_atomic     one pass: each block reduces its share and atomically adds it to out,
//                   which a memset step has zeroed
//   ALGO_twopass    each block writes a partial; a second launch of one block sums them
//   ALGO_lastblock  one pass: each block writes a partial and counts itself in an atomic
//                   counter (zeroed by a memset step); the last block to finish sums the partials
//   RED_shfl        block reduction with warp shuffles (one shared word per warp)
//   RED_smem        block reduction as a shared-memory tree with a barrier per level
//   BLOCK           threads per block
//   ITEMS           vectors of x and of y per thread per tile, all loaded before any is used
//                   (2*ITEMS loads in flight)
//   VEC             elements per load (1: float, 2: float2, 4: float4); N need not be a multiple
//   GRID            0: one tile of BLOCK*ITEMS*VEC elements per block;
//                   otherwise at most GRID blocks stride over the tiles (persistent grid)
//   ACC             independent accumulators (FMA chains) per thread: product k of a tile goes
//                   to accumulator k % ACC; they are added together once, after the last tile

#define TILE_VECS (BLOCK * ITEMS)

#if VEC == 4
typedef float4 vec_t;
#elif VEC == 2
typedef float2 vec_t;
#else
typedef float vec_t;
#endif

// acc[(k0 + j) % ACC] += a.j * b.j for the VEC lanes j of one pair of vectors; k0 is the index of
// the pair's first product in the tile, known at compile time where the callers unroll.
__device__ __forceinline__ void mac(float (&acc)[ACC], const vec_t a, const vec_t b, const int k0)
{
#if VEC == 4
    acc[(k0 + 0) % ACC] = fmaf(a.x, b.x, acc[(k0 + 0) % ACC]);
    acc[(k0 + 1) % ACC] = fmaf(a.y, b.y, acc[(k0 + 1) % ACC]);
    acc[(k0 + 2) % ACC] = fmaf(a.z, b.z, acc[(k0 + 2) % ACC]);
    acc[(k0 + 3) % ACC] = fmaf(a.w, b.w, acc[(k0 + 3) % ACC]);
#elif VEC == 2
    acc[(k0 + 0) % ACC] = fmaf(a.x, b.x, acc[(k0 + 0) % ACC]);
    acc[(k0 + 1) % ACC] = fmaf(a.y, b.y, acc[(k0 + 1) % ACC]);
#else
    acc[k0 % ACC] = fmaf(a, b, acc[k0 % ACC]);
#endif
}

// Returns the block's sum in thread 0 (other threads: unspecified).
__device__ __forceinline__ float block_reduce(float v)
{
#if defined(RED_shfl)
    __shared__ float warp_sums[BLOCK / 32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < BLOCK / 32 ? warp_sums[lane] : 0.0f;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    }
    return v;
#else
    __shared__ float s[BLOCK];
    s[threadIdx.x] = v;
    __syncthreads();
#pragma unroll
    for (int stride = BLOCK / 2; stride > 0; stride >>= 1) {
        if ((int)threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }
    return s[0];
#endif
}

// This thread's share of the products: vector tiles of TILE_VECS vectors of each input, then the
// scalar tail (the last n % VEC elements), which block 0 takes.
__device__ __forceinline__ float thread_dot(const float* __restrict__ x, const float* __restrict__ y, int n)
{
    const vec_t* xv = reinterpret_cast<const vec_t*>(x);
    const vec_t* yv = reinterpret_cast<const vec_t*>(y);
    const long long nvec = n / VEC;
    float acc[ACC];
#pragma unroll
    for (int k = 0; k < ACC; ++k) acc[k] = 0.0f;
#if GRID == 0
    const long long tile = blockIdx.x;
    {
#else
    for (long long tile = blockIdx.x; tile * TILE_VECS < nvec; tile += gridDim.x) {
#endif
        const long long base = tile * TILE_VECS + threadIdx.x;
        if ((tile + 1) * TILE_VECS <= nvec) {
            vec_t a[ITEMS], b[ITEMS];
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) {
                a[i] = xv[base + (long long)i * BLOCK];
                b[i] = yv[base + (long long)i * BLOCK];
            }
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) mac(acc, a[i], b[i], i * VEC);
        } else {
            // The last, partial tile: only vectors below nvec.
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) {
                const long long k = base + (long long)i * BLOCK;
                if (k < nvec) mac(acc, xv[k], yv[k], i * VEC);
            }
        }
    }
    if (VEC > 1 && blockIdx.x == 0 && (long long)threadIdx.x < n - nvec * VEC) {
        const long long k = nvec * VEC + threadIdx.x;
        acc[0] = fmaf(x[k], y[k], acc[0]);
    }
    // Pairwise sum of the accumulators.
#pragma unroll
    for (int w = ACC / 2; w > 0; w >>= 1)
#pragma unroll
        for (int k = 0; k < w; ++k) acc[k] += acc[k + w];
    return acc[0];
}

__device__ __forceinline__ int partial_count(int n)
{
    const int tiles = (int)(((long long)(n / VEC) + TILE_VECS - 1) / TILE_VECS);
    const int blocks = tiles > 0 ? tiles : 1;
#if GRID == 0
    return blocks;
#else
    return blocks < GRID ? blocks : GRID;
#endif
}

#if defined(ALGO_atomic)
extern "C" __global__ void __launch_bounds__(BLOCK)
dot_atomic(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out, int n)
{
    const float v = block_reduce(thread_dot(x, y, n));
    if (threadIdx.x == 0) atomicAdd(out, v);
}
#endif

#if defined(ALGO_twopass)
extern "C" __global__ void __launch_bounds__(BLOCK)
dot_partials(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ partials, int n)
{
    const float v = block_reduce(thread_dot(x, y, n));
    if (threadIdx.x == 0) partials[blockIdx.x] = v;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
dot_final(const float* __restrict__ partials, float* __restrict__ out, int n)
{
    const int count = partial_count(n);
    float acc = 0.0f;
    for (int i = threadIdx.x; i < count; i += BLOCK) acc += partials[i];
    const float v = block_reduce(acc);
    if (threadIdx.x == 0) out[0] = v;
}
#endif

#if defined(ALGO_lastblock)
extern "C" __global__ void __launch_bounds__(BLOCK)
dot_lastblock(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ partials,
              unsigned int* __restrict__ counter, float* __restrict__ out, int n)
{
    __shared__ bool is_last;
    const float v = block_reduce(thread_dot(x, y, n));
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = v;
        __threadfence();   // the partial is visible to every block before the count says so
        is_last = atomicAdd(counter, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    // Other blocks' partials: read through L2 (__ldcg), never from a stale L1 line.
    float acc = 0.0f;
    for (int i = threadIdx.x; i < (int)gridDim.x; i += BLOCK) acc += __ldcg(partials + i);
    const float total = block_reduce(acc);
    if (threadIdx.x == 0) out[0] = total;
}
#endif
