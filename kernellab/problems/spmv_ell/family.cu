// SpMV in ELLPACK layout, fp32: y[r] = sum over k < 32 of val[r, k] * x[col[r, k]], with val (fp32)
// and col (int32) both R x 32 row-major, so a row's entries are 128 contiguous bytes of each.
//
// Knobs (the variant's #define lines come before this text):
//   LANES          threads that share a row: a group of LANES neighbouring lanes of one warp. Lane l of
//                  a group takes the row's vectors l, l + LANES, l + 2*LANES, ... (VEC entries each),
//                  so the group's loads of one step are LANES*VEC neighbouring entries; the group's
//                  partial sums meet by xor shuffles. LANES == 1 is one thread per row.
//   VEC            entries per load of val and col: float/int, float2/int2 or float4/int4 (a row
//                  starts on a 128-byte boundary, so every vector is aligned)
//   ROWS           rows per group, all of their val and col loads issued before any gather; the
//                  group's rows are GROUPS apart, so that neighbouring groups take neighbouring rows
//   BLOCK          threads per block (BLOCK / LANES groups)
//   CACHE_ldg      val, col and x through the read-only path (__ldg)
//   CACHE_cg       val and col by __ldg, x by __ldcg: cached in L2 only, so that the random gathers
//                  (a 32-byte sector each for 4 useful bytes) do not churn L1
//   CACHE_stream   val and col by __ldcs (evict-first: each of their bytes is used once), so that x
//                  keeps its place in L2; x by __ldg
//   OCC            0: __launch_bounds__(BLOCK) only; otherwise the resident threads per SM promised to
//                  the compiler, __launch_bounds__(BLOCK, OCC / BLOCK), which caps a thread at
//                  65536 / OCC registers (64 or 32)
//
// Every variant takes any R: groups whose rows lie past the end load row R-1 and store nothing, so
// that every lane of a warp reaches the shuffles.

#define NNZ 32                          // entries per row (the problem's K; constraint K == 32)
#define PER_LANE (NNZ / LANES)          // entries of a row per lane
#define STEPS (PER_LANE / VEC)          // vector loads of val (and of col) per lane and row
#define GROUPS (BLOCK / LANES)          // row groups per block
#define ROWS_PER_BLOCK (GROUPS * ROWS)

#if OCC > 0
#define MINB (OCC / BLOCK)
#else
#define MINB 1
#endif

#if VEC == 4
typedef float4 fvec_t;
typedef int4 ivec_t;
#elif VEC == 2
typedef float2 fvec_t;
typedef int2 ivec_t;
#else
typedef float fvec_t;
typedef int ivec_t;
#endif

__device__ __forceinline__ void unpack(const fvec_t a, const ivec_t b, float (&v)[VEC], int (&c)[VEC])
{
#if VEC == 4
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    c[0] = b.x; c[1] = b.y; c[2] = b.z; c[3] = b.w;
#elif VEC == 2
    v[0] = a.x; v[1] = a.y;
    c[0] = b.x; c[1] = b.y;
#else
    v[0] = a;
    c[0] = b;
#endif
}

// Loads of the matrix (val, col): each byte is read once.
template <typename T>
__device__ __forceinline__ T load_matrix(const T* p)
{
#if defined(CACHE_stream)
    return __ldcs(p);
#else
    return __ldg(p);
#endif
}

// Gathers of x: random 4-byte reads of a 4 MB vector that L2 holds.
__device__ __forceinline__ float load_x(const float* p)
{
#if defined(CACHE_cg)
    return __ldcg(p);
#else
    return __ldg(p);
#endif
}

extern "C" __global__ void __launch_bounds__(BLOCK, MINB)
spmv_ell_family(const float* __restrict__ val, const int* __restrict__ col, const float* __restrict__ x,
                float* __restrict__ y, int rows)
{
    const int tid = threadIdx.x;
    const int lane = tid % LANES;       // position in the group (groups are aligned within a warp)
    const int group = tid / LANES;
    const int first = blockIdx.x * ROWS_PER_BLOCK + group;

    // Every val and col load of the group's rows first, then the gathers of x they name.
    fvec_t v[ROWS][STEPS];
    ivec_t c[ROWS][STEPS];
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
        const int r = min(first + i * GROUPS, rows - 1);
        const fvec_t* vp = reinterpret_cast<const fvec_t*>(val + (size_t)r * NNZ) + lane;
        const ivec_t* cp = reinterpret_cast<const ivec_t*>(col + (size_t)r * NNZ) + lane;
#pragma unroll
        for (int s = 0; s < STEPS; ++s) {
            v[i][s] = load_matrix(vp + s * LANES);
            c[i][s] = load_matrix(cp + s * LANES);
        }
    }

    float acc[ROWS];
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
        float a = 0.0f;
#pragma unroll
        for (int s = 0; s < STEPS; ++s) {
            float vv[VEC];
            int cc[VEC];
            unpack(v[i][s], c[i][s], vv, cc);
#pragma unroll
            for (int j = 0; j < VEC; ++j) a += vv[j] * load_x(x + cc[j]);
        }
        acc[i] = a;
    }

#if LANES > 1
    // Lanes of one group differ in the low log2(LANES) bits of their lane number.
#pragma unroll
    for (int i = 0; i < ROWS; ++i)
#pragma unroll
        for (int o = LANES / 2; o > 0; o >>= 1) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], o);
#endif

    if (lane == 0) {
#pragma unroll
        for (int i = 0; i < ROWS; ++i) {
            const int r = first + i * GROUPS;
            if (r < rows) y[r] = acc[i];
        }
    }
}
