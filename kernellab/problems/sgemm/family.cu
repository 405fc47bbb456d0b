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
//   ALGO_tf32x3    tensor cores at fp32 accuracy ("3xTF32"): each value x is split into
//                  big = tf32(x) and small = tf32(x - big), and a*b is summed as
//                  a_small*b_big + a_big*b_small + a_big*b_big by mma.sync m16n8k8 (tf32 inputs,
//                  fp32 accumulators); the dropped a_small*b_small is below fp32 rounding. Warp
//                  tiles WM x WN of 16 x 8 MMA tiles (TM * TN = WM * WN / 32 values of C per
//                  thread); tiles copied by cp.async (16 bytes), BUF stages; A kept as
//                  [BM][BK + 4] and B as [BK][BN + 8] in shared memory, so that the fragment
//                  reads of a warp fall in 32 different banks
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

#if defined(ALGO_tf32x3)

constexpr int AS_LD = BK + 4;            // floats in a row of the A tile in shared memory
constexpr int BS_LD = BN + 8;            // and in a row of the B tile
constexpr int MI = WM / 16, NI = WN / 8; // MMA tiles of a warp along M and N
constexpr int A_CHUNKS = BM * BK / 4, B_CHUNKS = BK * BN / 4;

__device__ __forceinline__ void cp_async16(float* smem, const float* gmem)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(s), "l"(gmem));
}

__device__ __forceinline__ unsigned to_tf32(float x)
{
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

// x = big + small, both tf32 (the bits of a float whose low 13 mantissa bits are zero).
__device__ __forceinline__ void split(float x, unsigned& big, unsigned& small)
{
    big = to_tf32(x);
    small = to_tf32(x - __uint_as_float(big));
}

__device__ __forceinline__ void mma_tf32(float (&c)[4], const unsigned (&a)[4], const unsigned (&b)[2])
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

extern "C" __global__ void __launch_bounds__(NT, MINB)
sgemm_family(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
             int M, int N, int K)
{
    __shared__ __align__(16) float As[BUF][BM][AS_LD];
    __shared__ __align__(16) float Bs[BUF][BK][BS_LD];

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wr = warp / (BN / WN), wc = warp % (BN / WN);
    const int g = lane / 4, t = lane % 4;    // the MMA fragment coordinates of this lane
    const float* Ablk = A + (size_t)blockIdx.y * BM * K;
    const float* Bblk = B + (size_t)blockIdx.x * BN;

    auto load_tile = [&](int stage, int k0) {
#pragma unroll
        for (int e = tid; e < A_CHUNKS; e += NT) {
            const int r = e / (BK / 4), c = (e % (BK / 4)) * 4;
            cp_async16(&As[stage][r][c], Ablk + (size_t)r * K + k0 + c);
        }
#pragma unroll
        for (int e = tid; e < B_CHUNKS; e += NT) {
            const int r = e / (BN / 4), c = (e % (BN / 4)) * 4;
            cp_async16(&Bs[stage][r][c], Bblk + (size_t)(k0 + r) * N + c);
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int v = 0; v < 4; ++v) acc[i][j][v] = 0.0f;

    auto compute = [&](int stage) {
#pragma unroll
        for (int kk = 0; kk < BK; kk += 8) {
            unsigned ab[MI][4], as[MI][4], bb[NI][2], bs[NI][2];
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                const int r = wr * WM + i * 16 + g;
                split(As[stage][r][kk + t], ab[i][0], as[i][0]);
                split(As[stage][r + 8][kk + t], ab[i][1], as[i][1]);
                split(As[stage][r][kk + t + 4], ab[i][2], as[i][2]);
                split(As[stage][r + 8][kk + t + 4], ab[i][3], as[i][3]);
            }
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                const int c = wc * WN + j * 8 + g;
                split(Bs[stage][kk + t][c], bb[j][0], bs[j][0]);
                split(Bs[stage][kk + t + 4][c], bb[j][1], bs[j][1]);
            }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j) {
                    mma_tf32(acc[i][j], as[i], bb[j]);
                    mma_tf32(acc[i][j], ab[i], bs[j]);
                    mma_tf32(acc[i][j], ab[i], bb[j]);
                }
        }
    };

    const int KT = K / BK;
#if BUF == 1
    for (int kt = 0; kt < KT; ++kt) {
        load_tile(0, kt * BK);
        asm volatile("cp.async.wait_group 0;\n" ::);
        __syncthreads();
        compute(0);
        __syncthreads();
    }
#else
    load_tile(0, 0);
    for (int kt = 0; kt < KT; ++kt) {
        if (kt + 1 < KT) {
            load_tile((kt + 1) & 1, (kt + 1) * BK);  // the stage computed in the step before
            asm volatile("cp.async.wait_group 1;\n" ::);
        } else {
            asm volatile("cp.async.wait_group 0;\n" ::);
        }
        __syncthreads();
        compute(kt & 1);
        __syncthreads();
    }
#endif

    // C fragment of a 16 x 8 tile: rows g and g + 8, columns 2t and 2t + 1.
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j) {
            const int r = blockIdx.y * BM + wr * WM + i * 16 + g;
            const int c = blockIdx.x * BN + wc * WN + j * 8 + 2 * t;
            *reinterpret_cast<float2*>(C + (size_t)r * N + c) = make_float2(acc[i][j][0], acc[i][j][1]);
            *reinterpret_cast<float2*>(C + (size_t)(r + 8) * N + c) = make_float2(acc[i][j][2], acc[i][j][3]);
        }
}

#elif defined(ALGO_naive)

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
