// Counts of N int32 keys in 2048 bins (bincount): hist[b] = number of keys equal to b; keys
// outside [0, 2047] are not counted. A memset step zeroes hist before the counting kernel, except
// for FLUSH_partials, whose second kernel writes every bin.
//
// Knobs (the variant's #define lines come before this text):
//   ALGO_global     every key is an atomic add on hist in global memory (resolved at L2)
//   ALGO_block      one private 2048-bin histogram per block (8 KB of dynamic shared memory)
//   ALGO_sub        HISTS sub-histograms per block (HISTS * 8 KB of dynamic shared memory), each
//                   counted into by BLOCK/HISTS consecutive threads (whole warps), so that fewer
//                   threads contend for one bin's word; summed bin by bin at the end of the block
//   HISTS           shared-memory histograms per block: 0 (global), 1 (block), 2 or 4 (sub);
//                   the launch passes HISTS * 8192 bytes of dynamic shared memory
//   FLUSH_none      (ALGO_global) nothing to flush
//   FLUSH_all       each block adds every bin of its histogram to hist with a global atomic
//   FLUSH_nonzero   the same, skipping the bins the block did not see
//   FLUSH_partials  (persistent grid) each block stores its histogram, without atomics, as row
//                   blockIdx.x of partials [GRID][2048]; bincount_finish (64 blocks of 1024
//                   threads) sums the rows into hist
//   BLOCK           threads per block
//   VEC             keys per load: 1 (int), 2 (int2), 4 (int4); any N (block 0 takes the last
//                   N % VEC keys)
//   ITEMS           independent loads in flight per thread per tile
//   GRID            0: one tile of BLOCK*ITEMS*VEC keys per block; otherwise at most GRID blocks
//                   stride over the tiles (persistent grid)

#define NBINS 2048
#define NQUADS (NBINS / 4)              // bins as uint4 groups: zeroing, summing and flushing
#define TILE_VECS (BLOCK * ITEMS)

#if VEC == 4
typedef int4 vec_t;
#elif VEC == 2
typedef int2 vec_t;
#else
typedef int vec_t;
#endif

__device__ __forceinline__ void count_key(unsigned int* h, int k)
{
    if ((unsigned int)k < NBINS) atomicAdd(&h[k], 1u);
}

__device__ __forceinline__ void count_vec(unsigned int* h, vec_t v)
{
#if VEC == 4
    count_key(h, v.x); count_key(h, v.y); count_key(h, v.z); count_key(h, v.w);
#elif VEC == 2
    count_key(h, v.x); count_key(h, v.y);
#else
    count_key(h, v);
#endif
}

#if !defined(ALGO_global)
__device__ __forceinline__ void add_quad(uint4& t, const uint4 u)
{
    t.x += u.x; t.y += u.y; t.z += u.z; t.w += u.w;
}

__device__ __forceinline__ void flush_bin(unsigned int* p, unsigned int v)
{
#if defined(FLUSH_nonzero)
    if (v) atomicAdd(p, v);
#else
    atomicAdd(p, v);
#endif
}
#endif

#if defined(FLUSH_partials)
// Blocks of the counting launch: one per tile of TILE_VECS vectors (at least one), at most GRID;
// the same count as the launch plan's grid expression, so the rows of partials that were written.
__device__ __forceinline__ int counting_blocks(int n)
{
    const long long tiles = ((long long)(n / VEC) + TILE_VECS - 1) / TILE_VECS;
    const long long blocks = tiles > 0 ? tiles : 1;
    return (int)(blocks < GRID ? blocks : GRID);
}
#endif

// out: hist, or (FLUSH_partials) partials, whose row blockIdx.x this block writes whole.
extern "C" __global__ void __launch_bounds__(BLOCK)
bincount_family(const int* __restrict__ keys, unsigned int* __restrict__ out, int n)
{
#if defined(ALGO_global)
    unsigned int* h = out;
#else
    extern __shared__ uint4 sh4[];      // HISTS histograms of NBINS counters, one after another
    unsigned int* sh = reinterpret_cast<unsigned int*>(sh4);
    for (int q = threadIdx.x; q < HISTS * NQUADS; q += BLOCK) sh4[q] = make_uint4(0u, 0u, 0u, 0u);
    __syncthreads();
    unsigned int* h = sh + (threadIdx.x / (BLOCK / HISTS)) * NBINS;
#endif

    const vec_t* kv = reinterpret_cast<const vec_t*>(keys);
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
            for (int i = 0; i < ITEMS; ++i) v[i] = kv[base + (long long)i * BLOCK];
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) count_vec(h, v[i]);
        } else {
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (base + (long long)i * BLOCK < nvec) count_vec(h, kv[base + (long long)i * BLOCK]);
        }
    }
    // The last n % VEC keys (fewer than VEC <= 4 < BLOCK).
    if (VEC > 1 && blockIdx.x == 0 && (long long)threadIdx.x < n - nvec * VEC)
        count_key(h, keys[nvec * VEC + threadIdx.x]);

#if !defined(ALGO_global)
    __syncthreads();
    for (int q = threadIdx.x; q < NQUADS; q += BLOCK) {
        uint4 t = sh4[q];
#pragma unroll
        for (int c = 1; c < HISTS; ++c) add_quad(t, sh4[c * NQUADS + q]);
#if defined(FLUSH_partials)
        reinterpret_cast<uint4*>(out)[(long long)blockIdx.x * NQUADS + q] = t;
#else
        flush_bin(&out[4 * q + 0], t.x);
        flush_bin(&out[4 * q + 1], t.y);
        flush_bin(&out[4 * q + 2], t.z);
        flush_bin(&out[4 * q + 3], t.w);
#endif
    }
#endif
}

#if defined(FLUSH_partials)
#define FINISH_THREADS 1024

// hist[b] = sum over the counting blocks' rows of partials[row][b]. Block x of 64 (FINISH_THREADS
// threads whatever BLOCK is, so that up to GRID rows are read with many loads in flight) owns bins
// 32x .. 32x+31: lane = bin, so a warp reads 128 contiguous bytes of a row; the 32 warps split the
// rows and meet in shared memory. Every bin of hist is written, so hist needs no memset.
extern "C" __global__ void __launch_bounds__(FINISH_THREADS)
bincount_finish(const unsigned int* __restrict__ partials, unsigned int* __restrict__ hist, int n)
{
    __shared__ unsigned int warp_sums[FINISH_THREADS / 32][32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int bin = blockIdx.x * 32 + lane;
    const int rows = counting_blocks(n);
    unsigned int acc = 0u;
#pragma unroll 4
    for (int r = warp; r < rows; r += FINISH_THREADS / 32) acc += partials[(long long)r * NBINS + bin];
    warp_sums[warp][lane] = acc;
    __syncthreads();
    if (warp == 0) {
        unsigned int total = 0u;
#pragma unroll
        for (int w = 0; w < FINISH_THREADS / 32; ++w) total += warp_sums[w][lane];
        hist[bin] = total;
    }
}
#endif
