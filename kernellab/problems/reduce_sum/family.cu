// Sum of N floats to one float.
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
//   ITEMS           independent loads in flight per thread per tile
//   VEC             elements per load (1: float, 2: float2, 4: float4); N need not be a multiple
//   GRID            0: one tile of BLOCK*ITEMS*VEC elements per block;
//                   otherwise at most GRID blocks stride over the tiles (persistent grid)

#define TILE_VECS (BLOCK * ITEMS)

#if VEC == 4
typedef float4 vec_t;
__device__ __forceinline__ float vsum(float4 v) { return (v.x + v.y) + (v.z + v.w); }
#elif VEC == 2
typedef float2 vec_t;
__device__ __forceinline__ float vsum(float2 v) { return v.x + v.y; }
#else
typedef float vec_t;
__device__ __forceinline__ float vsum(float v) { return v; }
#endif

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

// This thread's share of x: vector tiles of TILE_VECS vectors, then the scalar tail
// (the last n % VEC elements), which block 0 takes.
__device__ __forceinline__ float thread_sum(const float* __restrict__ x, int n)
{
    const vec_t* xv = reinterpret_cast<const vec_t*>(x);
    const long long nvec = n / VEC;
    float acc = 0.0f;
#if GRID == 0
    const long long tile = blockIdx.x;
    {
#else
    for (long long tile = blockIdx.x; tile * TILE_VECS < nvec; tile += gridDim.x) {
#endif
        const long long base = tile * TILE_VECS + threadIdx.x;
        vec_t v[ITEMS];
        if ((tile + 1) * TILE_VECS <= nvec) {
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) v[i] = xv[base + (long long)i * BLOCK];
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) acc += vsum(v[i]);
        } else {
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (base + (long long)i * BLOCK < nvec) acc += vsum(xv[base + (long long)i * BLOCK]);
        }
    }
    if (VEC > 1 && blockIdx.x == 0 && (long long)threadIdx.x < n - nvec * VEC)
        acc += x[nvec * VEC + threadIdx.x];
    return acc;
}

__device__ __forceinline__ int partial_count(int n)
{
    const int tiles = (int)((n / VEC + TILE_VECS - 1) / TILE_VECS);
    const int blocks = tiles > 0 ? tiles : 1;
#if GRID == 0
    return blocks;
#else
    return blocks < GRID ? blocks : GRID;
#endif
}

#if defined(ALGO_atomic)
extern "C" __global__ void __launch_bounds__(BLOCK)
reduce_atomic(const float* __restrict__ x, float* __restrict__ out, int n)
{
    const float v = block_reduce(thread_sum(x, n));
    if (threadIdx.x == 0) atomicAdd(out, v);
}
#endif

#if defined(ALGO_twopass)
extern "C" __global__ void __launch_bounds__(BLOCK)
reduce_partials(const float* __restrict__ x, float* __restrict__ partials, int n)
{
    const float v = block_reduce(thread_sum(x, n));
    if (threadIdx.x == 0) partials[blockIdx.x] = v;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
reduce_final(const float* __restrict__ partials, float* __restrict__ out, int n)
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
reduce_lastblock(const float* __restrict__ x, float* __restrict__ partials,
                 unsigned int* __restrict__ counter, float* __restrict__ out, int n)
{
    __shared__ bool is_last;
    const float v = block_reduce(thread_sum(x, n));
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = v;
        __threadfence();
        is_last = atomicAdd(counter, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    float acc = 0.0f;
    for (int i = threadIdx.x; i < (int)gridDim.x; i += BLOCK) acc += __ldcg(partials + i);
    const float total = block_reduce(acc);
    if (threadIdx.x == 0) out[0] = total;
}
#endif
