// HGEMM family in plain CUDA (no CUTLASS): C = A * B, row-major fp16, A is M x K, B is K x N,
// fp32 accumulation, C rounded once to fp16. SIMT and tensor-core kernels side by side.
//
// Knobs (the variant's #define lines come before this text):
//   ALGO_naive   register-tiled SIMT without shared memory: each thread a TM x TN block of C,
//                reading its TM rows of A (VEC halves at a time) and TN columns of B straight from
//                global memory (through L1/L2); fp32 FFMA
//   ALGO_smem    shared-memory tiled SIMT: BM x BK and BK x BN tiles loaded with VEC-half vectors,
//                converted to fp32 in shared memory (A transposed, so that a thread reads its TM
//                rows as float4), each thread a TM x TN register block of fp32 accumulators
//   ALGO_mma     warp-level tensor cores: mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32;
//                each warp owns a WM x WN tile of (WM/16) x (WN/8) MMA tiles, the block's tiles are
//                copied by 16-byte cp.async into STAGES shared-memory stages
//   BM, BN, BK   block tile; TM, TN thread tile (SIMT); WM, WN warp tile (mma)
//   VEC          SIMT global loads: 2 (half2, 4 bytes) or 8 halves (16 bytes)
//   STAGES       mma: 1, 2 or 3 cp.async stages (tile kt + STAGES - 1 is copied while tile kt is
//                multiplied); smem: 1, or 2 with the next tile prefetched into registers
//   PAD          1: pad shared rows against bank conflicts (mma: +8 halves on the rows of both
//                tiles, so that the eight 16-byte rows an ldmatrix phase reads fall in different
//                banks; smem: +4 floats on the rows of the transposed A tile); 0: none
//   LDM          mma: 1 reads the fragments with ldmatrix.x4 (.trans for B, which is K x N
//                row-major); 0 with plain 32-bit (A) and 16-bit (B) shared loads
//   MINB         minimum resident blocks per SM promised to the compiler (__launch_bounds__)
//
// Every variant takes any M and needs N % 8 == 0 and K % 8 == 0, so that every 8-half (16-byte)
// row segment is aligned and either wholly inside the matrix or wholly outside it. Partial tiles
// at the edges are zero-filled on load (cp.async with src-size 0, or zero registers) and masked on
// store.
#include <cuda_fp16.h>

// Two fp16 values packed in 32 bits (the lower address in the low half) as two floats.
__device__ __forceinline__ float2 h2_to_f2(unsigned u)
{
    return __half22float2(*reinterpret_cast<const __half2*>(&u));
}

__device__ __forceinline__ unsigned f2_to_h2(float lo, float hi)
{
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&h);
}

#if defined(ALGO_mma)

#define NT ((BM / WM) * (BN / WN) * 32)

constexpr int AS_LD = BK + 8 * PAD;      // halves in a row of the A tile in shared memory
constexpr int BS_LD = BN + 8 * PAD;      // and in a row of the B tile
constexpr int MI = WM / 16, NI = WN / 8; // MMA tiles of a warp along M and N
constexpr int A_CHUNKS = BM * BK / 8, B_CHUNKS = BK * BN / 8;   // 16-byte pieces of a tile
constexpr int A_IT = (A_CHUNKS + NT - 1) / NT, B_IT = (B_CHUNKS + NT - 1) / NT;

// 16 bytes global -> shared, bypassing L1; bytes = 0 writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int bytes)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(s), "l"(gmem), "r"(bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N_PENDING>
__device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N_PENDING) : "memory");
}

// Four 8 x 8 matrices of b16; lanes 8i .. 8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const __half* p)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const __half* p)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}

__device__ __forceinline__ void mma_f16(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

extern "C" __global__ void __launch_bounds__(NT, MINB)
hgemm_family(const __half* __restrict__ A, const __half* __restrict__ B, __half* __restrict__ C,
             int M, int N, int K)
{
    __shared__ __align__(128) __half As[STAGES][BM][AS_LD];
    __shared__ __align__(128) __half Bs[STAGES][BK][BS_LD];

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wr = warp / (BN / WN), wc = warp % (BN / WN);
    const int g = lane / 4, t = lane % 4;    // the MMA fragment coordinates of this lane
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

    // Copies the tiles of A (rows m0.., columns k0..) and B (rows k0.., columns n0..) into a
    // stage; pieces outside the matrices are zero-filled (N % 8 == 0 and K % 8 == 0, so a piece
    // is wholly inside or wholly outside). Commits one cp.async group.
    auto load_tile = [&](int stage, int k0) {
#pragma unroll
        for (int it = 0; it < A_IT; ++it) {
            const int e = tid + it * NT;
            if (A_CHUNKS % NT == 0 || e < A_CHUNKS) {
                const int r = e / (BK / 8), c = (e % (BK / 8)) * 8;
                const bool in = m0 + r < M && k0 + c < K;
                const __half* src = in ? A + (size_t)(m0 + r) * K + k0 + c : A;
                cp_async16(&As[stage][r][c], src, in ? 16 : 0);
            }
        }
#pragma unroll
        for (int it = 0; it < B_IT; ++it) {
            const int e = tid + it * NT;
            if (B_CHUNKS % NT == 0 || e < B_CHUNKS) {
                const int r = e / (BN / 8), c = (e % (BN / 8)) * 8;
                const bool in = k0 + r < K && n0 + c < N;
                const __half* src = in ? B + (size_t)(k0 + r) * N + n0 + c : B;
                cp_async16(&Bs[stage][r][c], src, in ? 16 : 0);
            }
        }
        cp_async_commit();
    };

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int v = 0; v < 4; ++v) acc[i][j][v] = 0.0f;

    // Fragments of m16n8k16 (g = lane / 4, t = lane % 4), two halves a register:
    //   A (16 x 16, row): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
    //   B (16 x 8, col):  b0 = (k 2t..2t+1, n g), b1 = (k 2t+8..2t+9, n g)
    auto compute = [&](int stage) {
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned af[MI][4], bf[NI][2];
#if LDM
            // ldmatrix.x4: lane l addresses row (l % 16), column 8 * (l / 16) of a 16 x 16 block.
            // For A the four matrices are exactly a0..a3; for B (.trans, rows are k) they are
            // b0, b1 of the n-tile j and b0, b1 of the n-tile j + 1.
#pragma unroll
            for (int i = 0; i < MI; ++i)
                ldmatrix_x4(af[i], &As[stage][wr * WM + i * 16 + lane % 16][kk + (lane / 16) * 8]);
#pragma unroll
            for (int j = 0; j < NI; j += 2) {
                unsigned r[4];
                ldmatrix_x4_trans(r, &Bs[stage][kk + lane % 16][wc * WN + j * 8 + (lane / 16) * 8]);
                bf[j][0] = r[0]; bf[j][1] = r[1]; bf[j + 1][0] = r[2]; bf[j + 1][1] = r[3];
            }
#else
            // Plain shared loads: the A pairs are adjacent in a row (32-bit loads); the B pairs lie
            // in two rows of the K x N tile (two 16-bit loads packed).
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                const int r = wr * WM + i * 16 + g;
                af[i][0] = *reinterpret_cast<const unsigned*>(&As[stage][r][kk + 2 * t]);
                af[i][1] = *reinterpret_cast<const unsigned*>(&As[stage][r + 8][kk + 2 * t]);
                af[i][2] = *reinterpret_cast<const unsigned*>(&As[stage][r][kk + 2 * t + 8]);
                af[i][3] = *reinterpret_cast<const unsigned*>(&As[stage][r + 8][kk + 2 * t + 8]);
            }
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                const int c = wc * WN + j * 8 + g;
                const unsigned short* b = reinterpret_cast<const unsigned short*>(&Bs[stage][0][0]);
                bf[j][0] = (unsigned)b[(kk + 2 * t) * BS_LD + c] | ((unsigned)b[(kk + 2 * t + 1) * BS_LD + c] << 16);
                bf[j][1] = (unsigned)b[(kk + 2 * t + 8) * BS_LD + c] | ((unsigned)b[(kk + 2 * t + 9) * BS_LD + c] << 16);
            }
#endif
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j) mma_f16(acc[i][j], af[i], bf[j][0], bf[j][1]);
        }
    };

    const int KT = (K + BK - 1) / BK;
#if STAGES == 1
    for (int kt = 0; kt < KT; ++kt) {
        load_tile(0, kt * BK);
        cp_async_wait<0>();
        __syncthreads();
        compute(0);
        __syncthreads();
    }
#else
    // Prologue: tiles 0 .. STAGES-2 in flight (one group each, empty groups past the end, so that
    // the group count stays uniform and wait_group STAGES-2 always means "tile kt has landed").
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KT) load_tile(s, s * BK);
        else cp_async_commit();
    }
    int stage = 0;
    for (int kt = 0; kt < KT; ++kt) {
        cp_async_wait<STAGES - 2>();
        // Tile kt is visible to all threads, and every thread has finished computing tile kt-1,
        // whose stage the copy below refills.
        __syncthreads();
        const int next = kt + STAGES - 1;
        int nstage = stage + STAGES - 1;
        if (nstage >= STAGES) nstage -= STAGES;
        if (next < KT) load_tile(nstage, next * BK);
        else cp_async_commit();
        compute(stage);
        stage = stage + 1 == STAGES ? 0 : stage + 1;
    }
    cp_async_wait<0>();
#endif

    // C fragment of a 16 x 8 tile: rows g and g + 8, columns 2t and 2t + 1 (N % 8 == 0, so the
    // pair is wholly inside or outside).
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j) {
            const int r = m0 + wr * WM + i * 16 + g;
            const int c = n0 + wc * WN + j * 8 + 2 * t;
            if (c < N) {
                if (r < M)
                    *reinterpret_cast<unsigned*>(C + (size_t)r * N + c) = f2_to_h2(acc[i][j][0], acc[i][j][1]);
                if (r + 8 < M)
                    *reinterpret_cast<unsigned*>(C + (size_t)(r + 8) * N + c) = f2_to_h2(acc[i][j][2], acc[i][j][3]);
            }
        }
}

#else  // SIMT: ALGO_naive, ALGO_smem

#define NT ((BM * BN) / (TM * TN))

// A global vector of VEC halves as raw bits.
#if VEC == 8
typedef uint4 gvec_t;
#else
typedef unsigned gvec_t;
#endif

__device__ __forceinline__ void unpack(const gvec_t& v, float (&f)[VEC])
{
#if VEC == 8
    float2 p;
    p = h2_to_f2(v.x); f[0] = p.x; f[1] = p.y;
    p = h2_to_f2(v.y); f[2] = p.x; f[3] = p.y;
    p = h2_to_f2(v.z); f[4] = p.x; f[5] = p.y;
    p = h2_to_f2(v.w); f[6] = p.x; f[7] = p.y;
#else
    const float2 p = h2_to_f2(v);
    f[0] = p.x; f[1] = p.y;
#endif
}

__device__ __forceinline__ gvec_t zero_vec()
{
#if VEC == 8
    return make_uint4(0u, 0u, 0u, 0u);
#else
    return 0u;
#endif
}

// L consecutive fp16 values of global memory (L = 4 or 8, aligned to 2L bytes) as floats.
template <int L>
__device__ __forceinline__ void ldg_halves(float (&dst)[L], const __half* src)
{
    if constexpr (L == 8) {
        const uint4 v = *reinterpret_cast<const uint4*>(src);
        float2 p;
        p = h2_to_f2(v.x); dst[0] = p.x; dst[1] = p.y;
        p = h2_to_f2(v.y); dst[2] = p.x; dst[3] = p.y;
        p = h2_to_f2(v.z); dst[4] = p.x; dst[5] = p.y;
        p = h2_to_f2(v.w); dst[6] = p.x; dst[7] = p.y;
    } else {
        const uint2 v = *reinterpret_cast<const uint2*>(src);
        float2 p;
        p = h2_to_f2(v.x); dst[0] = p.x; dst[1] = p.y;
        p = h2_to_f2(v.y); dst[2] = p.x; dst[3] = p.y;
    }
}

// Writes L floats as L consecutive fp16 values of one row of C (L = 4 or 8, aligned to 2L bytes).
template <int L>
__device__ __forceinline__ void stg_halves(__half* dst, const float (&src)[L])
{
    if constexpr (L == 8) {
        *reinterpret_cast<uint4*>(dst) = make_uint4(f2_to_h2(src[0], src[1]), f2_to_h2(src[2], src[3]),
                                                    f2_to_h2(src[4], src[5]), f2_to_h2(src[6], src[7]));
    } else {
        *reinterpret_cast<uint2*>(dst) = make_uint2(f2_to_h2(src[0], src[1]), f2_to_h2(src[2], src[3]));
    }
}

#if defined(ALGO_naive)

extern "C" __global__ void __launch_bounds__(NT, MINB)
hgemm_family(const __half* __restrict__ A, const __half* __restrict__ B, __half* __restrict__ C,
             int M, int N, int K)
{
    // Thread (tr, tc): rows row0 .. row0+TM-1 and columns col .. col+TN-1 of C; neighbouring
    // threads read neighbouring TN-half vectors of a row of B.
    const int tc = threadIdx.x % (BN / TN), tr = threadIdx.x / (BN / TN);
    const int col = blockIdx.x * BN + tc * TN;
    const int row0 = blockIdx.y * BM + tr * TM;
    if (col >= N || row0 >= M) return;      // no barriers in this kernel; N % TN == 0

    const __half* arow[TM];                  // rows past M read row M-1 and are not stored
#pragma unroll
    for (int i = 0; i < TM; ++i) arow[i] = A + (size_t)min(row0 + i, M - 1) * K;

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    for (int k = 0; k < K; k += VEC) {       // K % VEC == 0
        float a[TM][VEC];
#pragma unroll
        for (int i = 0; i < TM; ++i) unpack(*reinterpret_cast<const gvec_t*>(arow[i] + k), a[i]);
#pragma unroll
        for (int kk = 0; kk < VEC; ++kk) {
            float b[TN];
            ldg_halves<TN>(b, B + (size_t)(k + kk) * N + col);
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a[i][kk] * b[j];
        }
    }

#pragma unroll
    for (int i = 0; i < TM; ++i)
        if (row0 + i < M) stg_halves<TN>(C + (size_t)(row0 + i) * N + col, acc[i]);
}

#else  // ALGO_smem

constexpr int AS_LD = BM + 4 * PAD;      // floats in a row of the transposed A tile ([BK][BM])
constexpr int A_VPR = BK / VEC, A_VECS = BM * A_VPR, A_IT = (A_VECS + NT - 1) / NT;
constexpr int B_VPR = BN / VEC, B_VECS = BK * B_VPR, B_IT = (B_VECS + NT - 1) / NT;

// Reads L consecutive floats of shared memory as float4 (L % 4 == 0, 16-byte aligned).
template <int L>
__device__ __forceinline__ void lds(float (&dst)[L], const float* src)
{
#pragma unroll
    for (int i = 0; i < L; i += 4) {
        const float4 v = *reinterpret_cast<const float4*>(src + i);
        dst[i] = v.x; dst[i + 1] = v.y; dst[i + 2] = v.z; dst[i + 3] = v.w;
    }
}

extern "C" __global__ void __launch_bounds__(NT, MINB)
hgemm_family(const __half* __restrict__ A, const __half* __restrict__ B, __half* __restrict__ C,
             int M, int N, int K)
{
    __shared__ __align__(16) float As[STAGES][BK][AS_LD];
    __shared__ __align__(16) float Bs[STAGES][BK][BN];

    const int tid = threadIdx.x;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    gvec_t ra[A_IT], rb[B_IT];

    // Global -> registers; vectors outside the matrices are zero (N % 8 == 0 and K % 8 == 0, so
    // a vector of VEC <= 8 halves is wholly inside or wholly outside).
    auto load_tile = [&](int k0) {
#pragma unroll
        for (int it = 0; it < A_IT; ++it) {
            const int e = tid + it * NT;
            if (A_VECS % NT == 0 || e < A_VECS) {
                const int r = e / A_VPR, c = (e % A_VPR) * VEC;
                ra[it] = (m0 + r < M && k0 + c < K)
                       ? *reinterpret_cast<const gvec_t*>(A + (size_t)(m0 + r) * K + k0 + c) : zero_vec();
            }
        }
#pragma unroll
        for (int it = 0; it < B_IT; ++it) {
            const int e = tid + it * NT;
            if (B_VECS % NT == 0 || e < B_VECS) {
                const int r = e / B_VPR, c = (e % B_VPR) * VEC;
                rb[it] = (k0 + r < K && n0 + c < N)
                       ? *reinterpret_cast<const gvec_t*>(B + (size_t)(k0 + r) * N + n0 + c) : zero_vec();
            }
        }
    };

    // Registers -> shared memory as fp32: A transposed (As[k][m]), B as it is (Bs[k][n]).
    auto store_tile = [&](int buf) {
#pragma unroll
        for (int it = 0; it < A_IT; ++it) {
            const int e = tid + it * NT;
            if (A_VECS % NT == 0 || e < A_VECS) {
                const int r = e / A_VPR, c = (e % A_VPR) * VEC;
                float f[VEC];
                unpack(ra[it], f);
#pragma unroll
                for (int v = 0; v < VEC; ++v) As[buf][c + v][r] = f[v];
            }
        }
#pragma unroll
        for (int it = 0; it < B_IT; ++it) {
            const int e = tid + it * NT;
            if (B_VECS % NT == 0 || e < B_VECS) {
                const int r = e / B_VPR, c = (e % B_VPR) * VEC;
                float f[VEC];
                unpack(rb[it], f);
#if VEC == 8
                *reinterpret_cast<float4*>(&Bs[buf][r][c]) = make_float4(f[0], f[1], f[2], f[3]);
                *reinterpret_cast<float4*>(&Bs[buf][r][c + 4]) = make_float4(f[4], f[5], f[6], f[7]);
#else
                *reinterpret_cast<float2*>(&Bs[buf][r][c]) = make_float2(f[0], f[1]);
#endif
            }
        }
    };

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
            lds<TM>(rm, &As[buf][k][tr * TM]);
            lds<TN>(rn, &Bs[buf][k][tc * TN]);
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += rm[i] * rn[j];
        }
    };

    const int KT = (K + BK - 1) / BK;
#if STAGES == 1
    for (int kt = 0; kt < KT; ++kt) {
        load_tile(kt * BK);
        store_tile(0);
        __syncthreads();
        compute(0);
        __syncthreads();
    }
#else
    // Two buffers: the loads of tile kt+1 are in flight while tile kt is multiplied; one barrier
    // a tile (buffer cur^1 was last read in step kt-1, before the barrier that ended it).
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

    // N % 8 == 0 and TN divides 8: a row segment of TN values is wholly inside or outside.
    const int col = n0 + tc * TN;
    if (col < N) {
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int row = m0 + tr * TM + i;
            if (row < M) stg_halves<TN>(C + (size_t)row * N + col, acc[i]);
        }
    }
}

#endif  // ALGO_naive / ALGO_smem
#endif  // ALGO_mma / SIMT
