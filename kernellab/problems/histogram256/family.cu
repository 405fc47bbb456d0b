// 256-bin histogram family over N bytes; hist is zeroed by a memset step before the kernel.
//
// Knobs (the variant's #define lines come before this text):
//   ALGO_global   every byte is an atomic add in global memory
//   ALGO_shared   one private histogram per block in shared memory, added to hist at the end
//   ALGO_warp     one private histogram per warp in shared memory (less contention), summed
//                 over the warps and added to hist at the end
//   BLOCK         threads per block
//   VEC           bytes per load: 1 (uchar), 4 (uint), 16 (uint4); any N (block 0 takes the tail)
//   ITEMS         independent loads in flight per thread per tile
//   GRID          0: one tile of BLOCK*ITEMS*VEC bytes per block; otherwise at most GRID blocks
//                 stride over the tiles (persistent grid)

#define TILE_VECS (BLOCK * ITEMS)

#if VEC == 16
typedef uint4 vec_t;
#elif VEC == 4
typedef unsigned int vec_t;
#else
typedef unsigned char vec_t;
#endif

#if defined(ALGO_shared)
#define HCOPIES 1
#elif defined(ALGO_warp)
#define HCOPIES (BLOCK / 32)
#endif

__device__ __forceinline__ void count_word(unsigned int* h, unsigned int w)
{
    atomicAdd(&h[w & 255u], 1u);
    atomicAdd(&h[(w >> 8) & 255u], 1u);
    atomicAdd(&h[(w >> 16) & 255u], 1u);
    atomicAdd(&h[w >> 24], 1u);
}

__device__ __forceinline__ void count_vec(unsigned int* h, vec_t v)
{
#if VEC == 16
    count_word(h, v.x); count_word(h, v.y); count_word(h, v.z); count_word(h, v.w);
#elif VEC == 4
    count_word(h, v);
#else
    atomicAdd(&h[v], 1u);
#endif
}

extern "C" __global__ void __launch_bounds__(BLOCK)
histogram_family(const unsigned char* __restrict__ data, unsigned int* __restrict__ hist, int n)
{
#if defined(ALGO_global)
    unsigned int* h = hist;
#else
    __shared__ unsigned int sh[HCOPIES * 256];
    for (int i = threadIdx.x; i < HCOPIES * 256; i += BLOCK) sh[i] = 0u;
    __syncthreads();
#if defined(ALGO_warp)
    unsigned int* h = sh + (threadIdx.x / 32) * 256;
#else
    unsigned int* h = sh;
#endif
#endif

    const vec_t* dv = reinterpret_cast<const vec_t*>(data);
    const long long nvec = n / VEC;
#if GRID == 0
    const long long tile = blockIdx.x;
    {
#else
    for (long long tile = blockIdx.x; tile * TILE_VECS < nvec; tile += gridDim.x) {
#endif
        const long long base = tile * TILE_VECS + threadIdx.x;
        if ((tile + 1) * TILE_VECS <= nvec) {
            vec_t v[ITEMS];
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) v[i] = dv[base + (long long)i * BLOCK];
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) count_vec(h, v[i]);
        } else {
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (base + (long long)i * BLOCK < nvec) count_vec(h, dv[base + (long long)i * BLOCK]);
        }
    }
    if (VEC > 1 && blockIdx.x == 0 && (long long)threadIdx.x < n - nvec * VEC)
        atomicAdd(&h[data[nvec * VEC + threadIdx.x]], 1u);

#if !defined(ALGO_global)
    __syncthreads();
    for (int b = threadIdx.x; b < 256; b += BLOCK) {
        unsigned int total = 0u;
#pragma unroll
        for (int c = 0; c < HCOPIES; ++c) total += sh[c * 256 + b];
        if (total) atomicAdd(&hist[b], total);
    }
#endif
}
