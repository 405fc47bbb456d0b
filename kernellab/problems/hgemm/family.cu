// HGEMM family built from CuTe blocks: C = A * B, row-major fp16 with fp32 accumulation,
// A is M x K (K-major), B is K x N (N-major, i.e. MN-major for the MMA), C is M x N.
//
// The main loop follows CUTLASS's examples/cute/tutorial/hopper/wgmma_sm90.cu (BSD-3-Clause):
// cp.async (SM80_CP_ASYNC_CACHEALWAYS, 128-bit) fills a STAGES-deep ring of swizzled shared-memory
// tiles and Hopper's warpgroup MMA (wgmma, SM90 GMMA atoms, both operands from shared memory) consumes
// them. Unlike the tutorial, copies run ahead of the MMA (the copy of a later tile overlaps the MMA of
// tile k), the MMA of tile k may overlap the next iteration (OVERLAP), and C is stored as half2.
//
// Knobs (the variant's #define lines come before this text):
//   BM, BN, BK   block tile; BK = 64 uses the 128-byte swizzle atom, BK = 32 the 64-byte one
//   STAGES       shared-memory tiles in flight (2 to 5)
//   WGM          warpgroups (128 threads each) stacked along M; each computes (BM/WGM) x BN
//   GROUP        blocks along M that walk N together (1: row by row; 8: grouped raster, better L2 reuse)
//   OVERLAP      0: wait for each tile's MMA before the next; 1: leave one MMA in flight (wgmma.wait 1),
//                so copies run STAGES-2 tiles ahead instead of STAGES-1
//
// Needs M % BM == 0, N % BN == 0, K % BK == 0 (a constraint of the family), sm_90a and
// --expt-relaxed-constexpr (the family's compile options).

#include <cuda_fp16.h>
#include <cute/tensor.hpp>
#include <cute/arch/copy_sm80.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>

using namespace cute;

#define NT (128 * WGM)

extern "C" __global__ void __launch_bounds__(NT)
hgemm_cute(const __half* __restrict__ A_, const __half* __restrict__ B_, __half* __restrict__ C_,
           int m, int n, int k)
{
    using T = half_t;
    const T* A = reinterpret_cast<const T*>(A_);
    const T* B = reinterpret_cast<const T*>(B_);
    T* C = reinterpret_cast<T*>(C_);

    auto bM = Int<BM>{};
    auto bN = Int<BN>{};
    auto bK = Int<BK>{};
    auto bP = Int<STAGES>{};
    auto cta_tiler = make_shape(bM, bN, bK);

#if BK == 64
    using AtomA = GMMA::Layout_K_SW128_Atom<T>;
#else
    using AtomA = GMMA::Layout_K_SW64_Atom<T>;
#endif
    using AtomB = GMMA::Layout_MN_SW128_Atom<T>;
    auto sA_layout = tile_to_shape(AtomA{}, make_shape(bM, bK, bP));
    auto sB_layout = tile_to_shape(AtomB{}, make_shape(bN, bK, bP));

    // 128-bit copies: A along K (row-major rows of the A tile), B along N.
    constexpr int A_THREADS_K = BK / 8;
    TiledCopy copy_a = make_tiled_copy(Copy_Atom<SM80_CP_ASYNC_CACHEALWAYS<uint128_t>, T>{},
                                       Layout<Shape<Int<NT / A_THREADS_K>, Int<A_THREADS_K>>,
                                              Stride<Int<A_THREADS_K>, _1>>{},
                                       Layout<Shape<_1, _8>>{});
    constexpr int B_THREADS_N = BN / 8;
    TiledCopy copy_b = make_tiled_copy(Copy_Atom<SM80_CP_ASYNC_CACHEALWAYS<uint128_t>, T>{},
                                       Layout<Shape<Int<B_THREADS_N>, Int<NT / B_THREADS_N>>>{},
                                       Layout<Shape<_8, _1>>{});

    TiledMMA mma = make_tiled_mma(
        GMMA::ss_op_selector<T, T, float, Shape<Int<BM / WGM>, Int<BN>, Int<BK>>, GMMA::Major::K,
                             GMMA::Major::MN>(),
        Layout<Shape<Int<WGM>, _1, _1>>{});

    // Grouped raster: GROUP consecutive block rows share each column of B while it is in L2.
    const int tiles_m = m / BM, tiles_n = n / BN;
    const int linear = blockIdx.y * gridDim.x + blockIdx.x;
    const int per_group = GROUP * tiles_n;
    const int first_m = (linear / per_group) * GROUP;
    const int rows = min(tiles_m - first_m, GROUP);
    const int tile_m = first_m + (linear % per_group) % rows;
    const int tile_n = (linear % per_group) / rows;

    Tensor mA = make_tensor(make_gmem_ptr(A), make_shape(m, k), make_stride(k, Int<1>{}));   // (M,K)
    Tensor mB = make_tensor(make_gmem_ptr(B), make_shape(n, k), make_stride(Int<1>{}, n));   // (N,K)
    Tensor mC = make_tensor(make_gmem_ptr(C), make_shape(m, n), make_stride(n, Int<1>{}));   // (M,N)
    auto cta_coord = make_coord(tile_m, tile_n, _);
    Tensor gA = local_tile(mA, cta_tiler, cta_coord, Step<_1, X, _1>{});   // (BM,BK,k)
    Tensor gB = local_tile(mB, cta_tiler, cta_coord, Step<X, _1, _1>{});   // (BN,BK,k)
    Tensor gC = local_tile(mC, cta_tiler, cta_coord, Step<_1, _1, X>{});   // (BM,BN)

    extern __shared__ __align__(1024) unsigned char shared_tiles[];
    T* smem_a = reinterpret_cast<T*>(shared_tiles);
    T* smem_b = smem_a + cosize(sA_layout);
    Tensor sA = make_tensor(make_smem_ptr(smem_a), sA_layout);   // (BM,BK,STAGES)
    Tensor sB = make_tensor(make_smem_ptr(smem_b), sB_layout);   // (BN,BK,STAGES)

    ThrCopy thr_copy_a = copy_a.get_slice(threadIdx.x);
    Tensor tAgA = thr_copy_a.partition_S(gA);
    Tensor tAsA = thr_copy_a.partition_D(as_position_independent_swizzle_tensor(sA));
    ThrCopy thr_copy_b = copy_b.get_slice(threadIdx.x);
    Tensor tBgB = thr_copy_b.partition_S(gB);
    Tensor tBsB = thr_copy_b.partition_D(as_position_independent_swizzle_tensor(sB));

    ThrMMA thr_mma = mma.get_slice(threadIdx.x);
    Tensor tCsA = thr_mma.partition_A(sA);
    Tensor tCsB = thr_mma.partition_B(sB);
    Tensor tCgC = thr_mma.partition_C(gC);
    Tensor tCrA = thr_mma.make_fragment_A(tCsA);
    Tensor tCrB = thr_mma.make_fragment_B(tCsB);
    Tensor tCrC = thr_mma.make_fragment_C(tCgC);
    clear(tCrC);

    // Tiles fetched ahead of the one multiplied; the stage they land in was last read by an MMA that
    // every thread has waited for before the barrier of this iteration (OVERLAP MMAs stay in flight).
    constexpr int AHEAD = STAGES - 1 - OVERLAP;
    const int k_tiles = size<3>(tAgA);
    CUTE_UNROLL
    for (int stage = 0; stage < AHEAD; ++stage) {
        if (stage < k_tiles) {
            copy(copy_a, tAgA(_, _, _, stage), tAsA(_, _, _, stage));
            copy(copy_b, tBgB(_, _, _, stage), tBsB(_, _, _, stage));
        }
        cp_async_fence();
    }

    CUTE_NO_UNROLL
    for (int k_tile = 0; k_tile < k_tiles; ++k_tile) {
        cp_async_wait<AHEAD - 1>();
        // wgmma reads shared memory through the async proxy; cp.async wrote it through the generic one.
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();

        const int next = k_tile + AHEAD;
        if (next < k_tiles) {
            const int write = next % STAGES;
            copy(copy_a, tAgA(_, _, _, next), tAsA(_, _, _, write));
            copy(copy_b, tBgB(_, _, _, next), tBsB(_, _, _, write));
        }
        cp_async_fence();

        const int read = k_tile % STAGES;
        warpgroup_fence_operand(tCrC);
        warpgroup_arrive();
        cute::gemm(mma, tCrA(_, _, _, read), tCrB(_, _, _, read), tCrC);
        warpgroup_commit_batch();
        warpgroup_wait<OVERLAP>();
        warpgroup_fence_operand(tCrC);
    }
    warpgroup_wait<0>();
    warpgroup_fence_operand(tCrC);

    // Each thread's accumulators come in pairs of neighbouring columns: stored as 32-bit half2 writes.
    Tensor tCrC_half = make_fragment_like<T>(tCrC);
    CUTE_UNROLL
    for (int i = 0; i < size(tCrC); ++i)
        tCrC_half(i) = T(tCrC(i));
    copy(AutoVectorizingCopyWithAssumedAlignment<32>{}, tCrC_half, tCgC);
}
