// SGEMM family: C = A * B, row-major fp32, A is M x K, B is K x N.
//
// Knobs (the variant's #define lines come before this text):
//   ALGO_naive     one thread per element of C, no reuse through shared memory
//   ALGO_smem      shared-memory tiles, one element of C per thread (TM = TN = 1)
//   ALGO_tile1d    shared-memory tiles, TM elements of one column of C per thread
//   ALGO_tile2d    shared-memory tiles, a TM x TN register block per thread
//   ALGO_warptile  block tile -> warp tiles (WM x WN) -> WMITER x WNITER sub-tiles per warp,
//                  each thread holding TM x TN elements in all, as WMITER x WNITER fragments of
//                  4 x 4 (WMITER = TM/4, WNITER = TN/4)
//   BM, BN, BK     block tile; TM, TN thread tile; WM, WN warp tile
//   VEC            1: scalar global loads; 4: float4 global loads and stores (tile2d with VEC 4
//                  also stores A transposed in shared memory so that a thread reads its TM
//                  values of A as float4)
//   BUF            1: one shared-memory stage; 2: two stages, the next tile is fetched into
//                  registers while the current one is multiplied (one barrier per tile)
//   PAD            floats added to each row of the transposed A tile against bank conflicts
//   MINB           minimum resident blocks per SM promised to the compiler (__launch_bounds__)
//
// Tiled variants need M % BM == 0, N % BN == 0 and K % BK == 0 (a constraint of the family; the
// problem's size cases are multiples of 256 x 256 x 32); the naive variant takes any size.

#define NT ((BM * BN) / (TM * TN))

#if defined(ALGO_naive)

extern "C" __global__ void __launch_bounds__(NT)
sgemm_family(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
             int M, int N, int K)
{
    const int col = blockIdx.x * BN + (int)(threadIdx.x % BN);
    const int row = blockIdx.y * BM + (int)(threadIdx.x / BN);
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k)
        acc += A[(size_t)row * K + k] * B[(size_t)k * N + col];
    C[(size_t)row * N + col] = acc;
}

#else

#if defined(ALGO_warptile) || (defined(ALGO_tile2d) && VEC == 4)
#define TRANSA 1
#define AS_ROWS BK
#define AS_COLS (BM + PAD)
#else
#define TRANSA 0
#define AS_ROWS BM
#define AS_COLS (BK + PAD)
#endif

#if VEC == 4
typedef float4 vec_t;
#else
typedef float vec_t;
#endif

constexpr int A_VPR = BK / VEC;          // vectors in one row of the A tile
constexpr int A_VECS = BM * A_VPR;
constexpr int A_IT = (A_VECS + NT - 1) / NT;
constexpr int B_VPR = BN / VEC;          // vectors in one row of the B tile
constexpr int B_VECS = BK * B_VPR;
constexpr int B_IT = (B_VECS + NT - 1) / NT;

// Reads L consecutive floats of shared memory, as float4 when the offset allows it.
template <int L>
__device__ __forceinline__ void lds(float (&dst)[L], const float* src)
{
    if constexpr (L % 4 == 0) {
#pragma unroll
        for (int i = 0; i < L; i += 4) {
            const float4 v = *reinterpret_cast<const float4*>(src + i);
            dst[i] = v.x; dst[i + 1] = v.y; dst[i + 2] = v.z; dst[i + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int i = 0; i < L; ++i) dst[i] = src[i];
    }
}

// Writes L consecutive floats of one row of C, as float4 when VEC == 4 allows it.
template <int L>
__device__ __forceinline__ void stg(float* dst, const float (&src)[L])
{
    if constexpr (L % 4 == 0 && VEC == 4) {
#pragma unroll
        for (int i = 0; i < L; i += 4)
            *reinterpret_cast<float4*>(dst + i) = make_float4(src[i], src[i + 1], src[i + 2], src[i + 3]);
    } else {
#pragma unroll
        for (int i = 0; i < L; ++i) dst[i] = src[i];
    }
}

extern "C" __global__ void __launch_bounds__(NT, MINB)
sgemm_family(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
             int M, int N, int K)
{
    __shared__ __align__(16) float As[BUF][AS_ROWS][AS_COLS];
    __shared__ __align__(16) float Bs[BUF][BK][BN];

    const int tid = threadIdx.x;
    const float* Ablk = A + (size_t)blockIdx.y * BM * K;
    const float* Bblk = B + (size_t)blockIdx.x * BN;
    vec_t ra[A_IT];
    vec_t rb[B_IT];

    auto load_tile = [&](int k0) {
#pragma unroll
        for (int it = 0; it < A_IT; ++it) {
            const int e = tid + it * NT;
            if (A_VECS % NT == 0 || e < A_VECS) {
                const int r = e / A_VPR, c = (e % A_VPR) * VEC;
                ra[it] = *reinterpret_cast<const vec_t*>(Ablk + (size_t)r * K + k0 + c);
            }
        }
#pragma unroll
        for (int it = 0; it < B_IT; ++it) {
            const int e = tid + it * NT;
            if (B_VECS % NT == 0 || e < B_VECS) {
                const int r = e / B_VPR, c = (e % B_VPR) * VEC;
                rb[it] = *reinterpret_cast<const vec_t*>(Bblk + (size_t)(k0 + r) * N + c);
            }
        }
    };

    auto store_tile = [&](int buf) {
#pragma unroll
        for (int it = 0; it < A_IT; ++it) {
            const int e = tid + it * NT;
            if (A_VECS % NT == 0 || e < A_VECS) {
                const int r = e / A_VPR, c = (e % A_VPR) * VEC;
#if TRANSA && VEC == 4
                As[buf][c + 0][r] = ra[it].x;
                As[buf][c + 1][r] = ra[it].y;
                As[buf][c + 2][r] = ra[it].z;
                As[buf][c + 3][r] = ra[it].w;
#elif TRANSA
                As[buf][c][r] = ra[it];
#else
                *reinterpret_cast<vec_t*>(&As[buf][r][c]) = ra[it];
#endif
            }
        }
#pragma unroll
        for (int it = 0; it < B_IT; ++it) {
            const int e = tid + it * NT;
            if (B_VECS % NT == 0 || e < B_VECS) {
                const int r = e / B_VPR, c = (e % B_VPR) * VEC;
                *reinterpret_cast<vec_t*>(&Bs[buf][r][c]) = rb[it];
            }
        }
    };

#if defined(ALGO_smem) || defined(ALGO_tile1d)
    // Thread (tr, tc): rows tr*TM .. tr*TM+TM-1 of the block tile, column tc.
    const int tc = tid % BN, tr = tid / BN;
    float acc[TM];
#pragma unroll
    for (int i = 0; i < TM; ++i) acc[i] = 0.0f;
    auto compute = [&](int buf) {
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            const float b = Bs[buf][k][tc];
#pragma unroll
            for (int i = 0; i < TM; ++i) acc[i] += As[buf][tr * TM + i][k] * b;
        }
    };
#elif defined(ALGO_tile2d)
    // Thread (tr, tc): a contiguous TM x TN block of the block tile.
    const int tc = tid % (BN / TN), tr = tid / (BN / TN);
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    auto compute = [&](int buf) {
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float rm[TM], rn[TN];
#if TRANSA
            lds<TM>(rm, &As[buf][k][tr * TM]);
#else
#pragma unroll
            for (int i = 0; i < TM; ++i) rm[i] = As[buf][tr * TM + i][k];
#endif
            lds<TN>(rn, &Bs[buf][k][tc * TN]);
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += rm[i] * rn[j];
        }
    };
#elif defined(ALGO_warptile)
    constexpr int WMITER = TM / 4, WNITER = TN / 4;
    constexpr int TMS = TM / WMITER, TNS = TN / WNITER;     // thread fragment of one sub-tile
    constexpr int WSUBM = WM / WMITER, WSUBN = WN / WNITER; // warp sub-tile
    constexpr int LANES_N = WSUBN / TNS;                    // lanes along N in a sub-tile
    const int warp = tid / 32, lane = tid % 32;
    const int wr = warp / (BN / WN), wc = warp % (BN / WN);
    const int lr = lane / LANES_N, lc = lane % LANES_N;
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    auto compute = [&](int buf) {
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float rm[WMITER][TMS], rn[WNITER][TNS];
#pragma unroll
            for (int wm = 0; wm < WMITER; ++wm)
                lds<TMS>(rm[wm], &As[buf][k][wr * WM + wm * WSUBM + lr * TMS]);
#pragma unroll
            for (int wn = 0; wn < WNITER; ++wn)
                lds<TNS>(rn[wn], &Bs[buf][k][wc * WN + wn * WSUBN + lc * TNS]);
#pragma unroll
            for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
                for (int i = 0; i < TMS; ++i)
#pragma unroll
                    for (int wn = 0; wn < WNITER; ++wn)
#pragma unroll
                        for (int j = 0; j < TNS; ++j)
                            acc[wm * TMS + i][wn * TNS + j] += rm[wm][i] * rn[wn][j];
        }
    };
#endif

    const int KT = K / BK;
#if BUF == 1
    for (int kt = 0; kt < KT; ++kt) {
        load_tile(kt * BK);
        store_tile(0);
        __syncthreads();
        compute(0);
        __syncthreads();
    }
#else
    load_tile(0);
    store_tile(0);
    __syncthreads();
    for (int kt = 0; kt < KT; ++kt) {
        const int cur = kt & 1;
        if (kt + 1 < KT) load_tile((kt + 1) * BK);
        compute(cur);
        if (kt + 1 < KT) store_tile(cur ^ 1);
        __syncthreads();
    }
#endif

    float* Cblk = C + (size_t)blockIdx.y * BM * N + (size_t)blockIdx.x * BN;
#if defined(ALGO_smem) || defined(ALGO_tile1d)
#pragma unroll
    for (int i = 0; i < TM; ++i) Cblk[(size_t)(tr * TM + i) * N + tc] = acc[i];
#elif defined(ALGO_tile2d)
#pragma unroll
    for (int i = 0; i < TM; ++i) stg<TN>(Cblk + (size_t)(tr * TM + i) * N + tc * TN, acc[i]);
#elif defined(ALGO_warptile)
#pragma unroll
    for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
        for (int i = 0; i < TMS; ++i) {
            float* crow = Cblk + (size_t)(wr * WM + wm * WSUBM + lr * TMS + i) * N + wc * WN + lc * TNS;
#pragma unroll
            for (int wn = 0; wn < WNITER; ++wn) {
                float frag[TNS];
#pragma unroll
                for (int j = 0; j < TNS; ++j) frag[j] = acc[wm * TMS + i][wn * TNS + j];
                stg<TNS>(crow + wn * WSUBN, frag);
            }
        }
#endif
}

#endif
