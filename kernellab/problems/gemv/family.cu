// GEMV family, fp32: y (M) = A (M x K, row-major) x (K).
//
// Knobs (the variant's #define lines come before this text):
//   MAP_thread   each thread owns ROWS rows and walks them along K (a warp touches 32 rows at once)
//   MAP_warp     each warp owns ROWS rows, its lanes stride along K, shuffle reduction
//   MAP_block    each block owns ROWS rows, all threads stride along K, shuffles plus shared words
//   BLOCK        threads per block
//   VEC          floats per load of A and x (1, 2, 4; needs K % VEC == 0)
//   ROWS         rows that share every load of x (kept in ROWS accumulators)
//   UNROLL       independent loads of each row in flight per thread
//   XLOAD_ldg    x is read through the read-only cache at every use
//   XLOAD_smem   the block stages x in shared memory, XCHUNK floats at a time, between barriers

#if VEC == 4
typedef float4 vec_t;
#define VDOT(a, b) (((a).x * (b).x + (a).y * (b).y) + ((a).z * (b).z + (a).w * (b).w))
#elif VEC == 2
typedef float2 vec_t;
#define VDOT(a, b) ((a).x * (b).x + (a).y * (b).y)
#else
typedef float vec_t;
#define VDOT(a, b) ((a) * (b))
#endif

#if defined(MAP_thread)
#define LANES 1
#define ROWS_PER_BLOCK (BLOCK * ROWS)
#elif defined(MAP_warp)
#define LANES 32
#define ROWS_PER_BLOCK ((BLOCK / 32) * ROWS)
#else
#define LANES BLOCK
#define ROWS_PER_BLOCK ROWS
#endif
#define NWARPS (BLOCK / 32)
#define XCHUNK 2048
#define XVECS (XCHUNK / VEC)

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
gemv_family(const float* __restrict__ A, const float* __restrict__ x, float* __restrict__ y, int M, int K)
{
    const int tid = threadIdx.x;
    const int lane = tid % 32, warp = tid / 32;
#if defined(MAP_thread)
    // Thread t owns rows first + t + j*BLOCK: a warp's rows are neighbours.
    const int first = blockIdx.x * ROWS_PER_BLOCK + tid;
    const int rstride = BLOCK;
    const int me = 0;
#elif defined(MAP_warp)
    const int first = blockIdx.x * ROWS_PER_BLOCK + warp * ROWS;
    const int rstride = 1;
    const int me = lane;
#else
    const int first = blockIdx.x * ROWS_PER_BLOCK;
    const int rstride = 1;
    const int me = tid;
#endif
    // Rows past M read row M-1 and store nothing, so every thread reaches every barrier.
    const vec_t* arow[ROWS];
    float acc[ROWS];
#pragma unroll
    for (int j = 0; j < ROWS; ++j) {
        const int r = min(first + j * rstride, M - 1);
        arow[j] = reinterpret_cast<const vec_t*>(A + (size_t)r * K);
        acc[j] = 0.0f;
    }
    const int nv = K / VEC;
    const vec_t* xv = reinterpret_cast<const vec_t*>(x);

#if defined(XLOAD_smem)
    __shared__ vec_t xs[XVECS];
    for (int c0 = 0; c0 < nv; c0 += XVECS) {
        const int cn = min(XVECS, nv - c0);
        __syncthreads();
        for (int i = tid; i < cn; i += BLOCK) xs[i] = __ldg(xv + c0 + i);
        __syncthreads();
#define XAT(v) xs[v]
#else
    {
        const int c0 = 0, cn = nv;
#define XAT(v) __ldg(xv + (v))
#endif
        for (int v0 = me; v0 < cn; v0 += LANES * UNROLL) {
            vec_t a[UNROLL][ROWS];
            vec_t b[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int v = v0 + u * LANES;
                if (v < cn) {
                    b[u] = XAT(v);
#pragma unroll
                    for (int j = 0; j < ROWS; ++j) a[u][j] = __ldg(arow[j] + c0 + v);
                }
            }
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                if (v0 + u * LANES < cn) {
#pragma unroll
                    for (int j = 0; j < ROWS; ++j) acc[j] += VDOT(a[u][j], b[u]);
                }
            }
        }
    }
#undef XAT

#if defined(MAP_thread)
#pragma unroll
    for (int j = 0; j < ROWS; ++j) {
        const int r = first + j * rstride;
        if (r < M) y[r] = acc[j];
    }
#elif defined(MAP_warp)
#pragma unroll
    for (int j = 0; j < ROWS; ++j) {
        const float s = warp_sum(acc[j]);
        const int r = first + j;
        if (lane == 0 && r < M) y[r] = s;
    }
#else
    __shared__ float red[ROWS][NWARPS];
#pragma unroll
    for (int j = 0; j < ROWS; ++j) {
        const float s = warp_sum(acc[j]);
        if (lane == 0) red[j][warp] = s;
    }
    __syncthreads();
    if (warp == 0) {
#pragma unroll
        for (int j = 0; j < ROWS; ++j) {
            const float s = warp_sum(lane < NWARPS ? red[j][lane] : 0.0f);
            const int r = first + j;
            if (lane == 0 && r < M) y[r] = s;
        }
    }
#endif
}
