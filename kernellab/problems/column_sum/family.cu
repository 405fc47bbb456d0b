// Column sums of an R x C fp32 matrix, row-major: out[c] = sum over r of x[r, c].
//
// Knobs (the variant's #define lines come before this text):
//   MAP_thread       each thread owns VEC neighbouring columns and walks its rows alone (RT == 1)
//   MAP_warp         a warp is (32/RT) column lanes x RT row lanes; the RT partial sums of a
//                    column meet by warp shuffles; the block's warps sit side by side across columns
//   MAP_block        a block is (BLOCK/RT) column threads (whole warps) x RT row threads; the RT
//                    partial sums of a column meet in shared memory
//   RT               threads of one block that split the rows of a column group (1 for MAP_thread)
//   BLOCK            threads per block; a block covers BLOCK*VEC/RT columns
//   VEC              neighbouring columns per thread, read as one float / float2 / float4 when
//                    C % VEC == 0; otherwise (checked at run time) as VEC scalar loads, so every
//                    variant takes any C
//   ITEMS            rows per thread whose loads are in flight at once (RT rows apart)
//   SPLIT            blocks that split the rows of a column tile (gridDim.y), each taking
//                    ceil(R / SPLIT) rows
//   COMBINE_store    SPLIT == 1: a block's sums are final and are stored
//   COMBINE_atomic   each block atomically adds its sums to out, which a memset step has zeroed
//   COMBINE_twopass  each block stores its sums in row blockIdx.y of partials [SPLIT][C]; a second
//                    kernel sums the SPLIT partials of each column

#if VEC == 4
typedef float4 vec_t;
#elif VEC == 2
typedef float2 vec_t;
#else
typedef float vec_t;
#endif

#define GROUPS_PER_BLOCK (BLOCK / RT)   // column groups (VEC columns each) per block

__device__ __forceinline__ void unpack(const vec_t t, float (&v)[VEC])
{
#if VEC == 4
    v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
#elif VEC == 2
    v[0] = t.x; v[1] = t.y;
#else
    v[0] = t;
#endif
}

__device__ __forceinline__ vec_t pack(const float (&v)[VEC])
{
#if VEC == 4
    return make_float4(v[0], v[1], v[2], v[3]);
#elif VEC == 2
    return make_float2(v[0], v[1]);
#else
    return v[0];
#endif
}

// The VEC floats of one row at p (columns c0 .. c0+VEC-1). ALIGNED: C % VEC == 0, so the whole
// group lies inside the row and p is VEC*4-byte aligned; otherwise columns past C read as 0.
template <bool ALIGNED>
__device__ __forceinline__ void load_row(const float* __restrict__ p, int c0, int cols, float (&v)[VEC])
{
    if (ALIGNED) {
        unpack(__ldg(reinterpret_cast<const vec_t*>(p)), v);
    } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[j] = c0 + j < cols ? __ldg(p + j) : 0.0f;
    }
}

// Adds rows r, r+RT, r+2*RT, ... below r_end of columns c0 .. c0+VEC-1 into acc: rounds of ITEMS
// rows, all loaded before any is added, then the last rows (fewer than ITEMS) one at a time.
// Neither loop is unrolled further, so that ITEMS alone sets the loads in flight.
template <bool ALIGNED>
__device__ __forceinline__ void sum_rows(const float* __restrict__ x, int r, int r_end, int cols, int c0,
                                         float (&acc)[VEC])
{
    const size_t step = (size_t)RT * cols;
    const float* p = x + (size_t)r * cols + c0;
#pragma unroll 1
    for (; r + (ITEMS - 1) * RT < r_end; r += ITEMS * RT) {
        float v[ITEMS][VEC];
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) load_row<ALIGNED>(p + i * step, c0, cols, v[i]);
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
#pragma unroll
            for (int j = 0; j < VEC; ++j) acc[j] += v[i][j];
        p += ITEMS * step;
    }
#pragma unroll 1
    for (; r < r_end; r += RT) {
        float v[VEC];
        load_row<ALIGNED>(p, c0, cols, v);
#pragma unroll
        for (int j = 0; j < VEC; ++j) acc[j] += v[j];
        p += step;
    }
}

// This block's sum of column c (over its rows) goes to dst: out, or partials for COMBINE_twopass.
__device__ __forceinline__ void emit(float* __restrict__ dst, int cols, int c, float v)
{
#if defined(COMBINE_store)
    dst[c] = v;
#elif defined(COMBINE_atomic)
    atomicAdd(dst + c, v);
#else
    dst[(size_t)blockIdx.y * cols + c] = v;
#endif
}

extern "C" __global__ void __launch_bounds__(BLOCK)
column_sum_family(const float* __restrict__ x, float* __restrict__ dst, int rows, int cols)
{
    const int tid = threadIdx.x;
    // gl: this thread's column group within the block; ty: its row lane (0 .. RT-1).
#if defined(MAP_thread)
    const int gl = tid, ty = 0;
#elif defined(MAP_warp)
#define WX (32 / RT)                    // column lanes per warp
    const int lane = tid % 32;
    const int gl = (tid / 32) * WX + lane % WX, ty = lane / WX;
#else
#define BX (BLOCK / RT)                 // column threads per block row (a multiple of 32)
    const int gl = tid % BX, ty = tid / BX;
#endif
    const int c0 = (blockIdx.x * GROUPS_PER_BLOCK + gl) * VEC;
    const int chunk = (rows + SPLIT - 1) / SPLIT;
    const int r_begin = blockIdx.y * chunk;
    const int r_end = min(rows, r_begin + chunk);

    float acc[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) acc[j] = 0.0f;
    // Threads past the last column add nothing but still take part in the combine below.
    if (c0 < cols) {
        if (cols % VEC == 0) sum_rows<true>(x, r_begin + ty, r_end, cols, c0, acc);
        else sum_rows<false>(x, r_begin + ty, r_end, cols, c0, acc);
    }

#if defined(MAP_thread)
#pragma unroll
    for (int j = 0; j < VEC; ++j)
        if (c0 + j < cols) emit(dst, cols, c0 + j, acc[j]);
#elif defined(MAP_warp)
    // Lanes of one column group differ in the bits of ty (lane = ty*WX + column lane).
#pragma unroll
    for (int o = WX; o < 32; o <<= 1)
#pragma unroll
        for (int j = 0; j < VEC; ++j) acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], o);
    if (ty == 0) {
#pragma unroll
        for (int j = 0; j < VEC; ++j)
            if (c0 + j < cols) emit(dst, cols, c0 + j, acc[j]);
    }
#else
    // s[ty][gl] holds the VEC sums of row lane ty; as floats, row ty is the block's BX*VEC columns
    // in order, so the sums below read and store consecutive columns across threads.
    __shared__ vec_t s[RT][BX];
    s[ty][gl] = pack(acc);
    __syncthreads();
    const float* sf = reinterpret_cast<const float*>(&s[0][0]);
    for (int i = tid; i < BX * VEC; i += BLOCK) {
        float v = 0.0f;
#pragma unroll
        for (int y = 0; y < RT; ++y) v += sf[y * BX * VEC + i];
        const int c = blockIdx.x * BX * VEC + i;
        if (c < cols) emit(dst, cols, c, v);
    }
#endif
}

#if defined(COMBINE_twopass)
// out[c] = sum of the SPLIT partial sums of column c.
extern "C" __global__ void __launch_bounds__(BLOCK)
column_sum_finish(const float* __restrict__ partials, float* __restrict__ out, int cols)
{
    const int c = blockIdx.x * BLOCK + threadIdx.x;
    if (c >= cols) return;
    float acc = 0.0f;
#pragma unroll
    for (int s = 0; s < SPLIT; ++s) acc += __ldg(partials + (size_t)s * cols + c);
    out[c] = acc;
}
#endif
