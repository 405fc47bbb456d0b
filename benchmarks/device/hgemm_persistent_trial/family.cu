// TRIAL, not bundled (2026-12-01): kernellab/problems/hgemm/family.cu made persistent. The grid is
// min(132, tiles) blocks (the H200's SM count) and each block walks output tiles blockIdx.x,
// blockIdx.x + gridDim.x, ...; the producer keeps filling stages for the next tile while the consumers
// store C, so the epilogue and each tile's pipeline fill overlap the copies. Measured on the H200 beside
// the bundled family (benchmarks/results/hgemm_h200_persistent-trial_2026-12-01.jsonl.gz): slower for
// every tile shape tried (580 against 614 TFLOP/s at 128 x 256), so the bundled family stays as it is.
//
// HGEMM family built from CuTe blocks: C = A * B, row-major fp16 with fp32 accumulation,
// A is M x K (K-major), B is K x N (N-major, i.e. MN-major for the MMA), C is M x N.
//
// Warp-specialised, after CUTLASS's sm90 cp.async mainloop (gemm/collective/
// sm90_mma_multistage_gmma_ss_warpspecialized.hpp, BSD-3-Clause) written out with CuTe blocks:
// warpgroup 0 is the producer, it copies tiles with cp.async (SM80_CP_ASYNC_CACHEGLOBAL, 128-bit) into a
// STAGES-deep ring of swizzled shared-memory tiles; each copy signals the stage's "full" mbarrier when it
// lands (cp.async.mbarrier.arrive.noinc). Warpgroups 1..WGM are consumers: they wait on "full", run
// Hopper's warpgroup MMA (wgmma, SM90 GMMA atoms, both operands from shared memory) and hand the stage
// back on its "empty" mbarrier once their MMAs have read it. No __syncthreads() in the main loop: the
// producer runs up to STAGES tiles ahead of the MMAs. With two consumers, setmaxnreg moves registers
// from the producer (which needs few) to the consumers (which hold the accumulators).
//
// Knobs (the variant's #define lines come before this text):
//   BM, BN       block tile (BK = 64: the 128-byte swizzle atom for both operands)
//   STAGES       shared-memory tiles in the ring (3 to 6)
//   WGM          consumer warpgroups (128 threads each) stacked along M; each computes (BM/WGM) x BN
//   GROUP        blocks along M that walk N together (1: row by row; 8: grouped raster, better L2 reuse)
//   OVERLAP      0: a consumer waits for each tile's MMA before releasing it; 1: one MMA stays in flight
//                (wgmma.wait 1) and the tile before it is released
//
// Needs M % BM == 0, N % BN == 0, K % 64 == 0 (a constraint of the family), sm_90a and
// --expt-relaxed-constexpr (the family's compile options).

#include <cuda_fp16.h>
#include <cute/tensor.hpp>
#include <cute/arch/copy_sm80.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

using namespace cute;

#define BK 64
#define NT (128 * (WGM + 1))
// Two consumer warpgroups: setmaxnreg moves registers from the producer to the consumers, within the
// 65,536 of the SM (the launch bound caps all 384 threads at 168 each, 128 x (40 + 2 x 232) fit).
// One consumer warpgroup: 256 threads can all have 255 registers, nothing to move.
#define PRODUCER_REGS 40
#define CONSUMER_REGS 232

extern "C" __global__ void __launch_bounds__(NT, 1)
hgemm_cute(const __half* __restrict__ A_, const __half* __restrict__ B_, __half* __restrict__ C_,
           int m, int n, int k)
{
    using T = half_t;
    using Barrier = cutlass::arch::ClusterBarrier;
    const T* A = reinterpret_cast<const T*>(A_);
    const T* B = reinterpret_cast<const T*>(B_);
    T* C = reinterpret_cast<T*>(C_);

    auto bM = Int<BM>{};
    auto bN = Int<BN>{};
    auto bK = Int<BK>{};
    auto bP = Int<STAGES>{};
    auto cta_tiler = make_shape(bM, bN, bK);

    auto sA_layout = tile_to_shape(GMMA::Layout_K_SW128_Atom<T>{}, make_shape(bM, bK, bP));
    auto sB_layout = tile_to_shape(GMMA::Layout_MN_SW128_Atom<T>{}, make_shape(bN, bK, bP));

    const int tiles_m = m / BM, tiles_n = n / BN;
    const int tiles = tiles_m * tiles_n;
    Tensor mA = make_tensor(make_gmem_ptr(A), make_shape(m, k), make_stride(k, Int<1>{}));   // (M,K)
    Tensor mB = make_tensor(make_gmem_ptr(B), make_shape(n, k), make_stride(Int<1>{}, n));   // (N,K)
    Tensor mC = make_tensor(make_gmem_ptr(C), make_shape(m, n), make_stride(n, Int<1>{}));   // (M,N)
    // Grouped raster: GROUP consecutive block rows share each column of B while it is in L2.
    auto tile_coord = [&](int linear) {
        const int per_group = GROUP * tiles_n;
        const int first_m = (linear / per_group) * GROUP;
        const int rows = min(tiles_m - first_m, GROUP);
        return make_coord(first_m + (linear % per_group) % rows, (linear % per_group) / rows, _);
    };

    extern __shared__ __align__(1024) unsigned char shared_tiles[];
    T* smem_a = reinterpret_cast<T*>(shared_tiles);
    T* smem_b = smem_a + cosize(sA_layout);
    uint64_t* full = reinterpret_cast<uint64_t*>(smem_b + cosize(sB_layout));   // STAGES of each
    uint64_t* empty = full + STAGES;
    Tensor sA = make_tensor(make_smem_ptr(smem_a), sA_layout);   // (BM,BK,STAGES)
    Tensor sB = make_tensor(make_smem_ptr(smem_b), sB_layout);   // (BN,BK,STAGES)

    if (threadIdx.x == 0) {
        CUTE_UNROLL
        for (int s = 0; s < STAGES; ++s) {
            Barrier::init(&full[s], 128);          // one cp.async arrival per producer thread
            Barrier::init(&empty[s], 4 * WGM);     // one arrival per consumer warp
        }
        cutlass::arch::fence_barrier_init();
    }
    __syncthreads();

    const int k_tiles = k / BK;
    const int warpgroup = threadIdx.x / 128;

    if (warpgroup == 0) {
        // Producer: 128 threads, each stage is BM x 64 of A (8 threads along K) and 64 x BN of B
        // (BN/8 threads along N), 16-byte cp.async into the swizzled layout.
#if WGM > 1
        cutlass::arch::warpgroup_reg_dealloc<PRODUCER_REGS>();
#endif
        TiledCopy copy_a = make_tiled_copy(Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<uint128_t>, T>{},
                                           Layout<Shape<_16, _8>, Stride<_8, _1>>{},
                                           Layout<Shape<_1, _8>>{});
        constexpr int B_THREADS_N = BN / 8;
        TiledCopy copy_b = make_tiled_copy(Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<uint128_t>, T>{},
                                           Layout<Shape<Int<B_THREADS_N>, Int<128 / B_THREADS_N>>>{},
                                           Layout<Shape<_8, _1>>{});
        const int t = threadIdx.x;
        ThrCopy thr_copy_a = copy_a.get_slice(t);
        ThrCopy thr_copy_b = copy_b.get_slice(t);
        Tensor tAsA = thr_copy_a.partition_D(as_position_independent_swizzle_tensor(sA));
        Tensor tBsB = thr_copy_b.partition_D(as_position_independent_swizzle_tensor(sB));
        int it = 0;   // k-tiles produced so far, over every output tile: picks the stage and its phase
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
            auto coord = tile_coord(tile);
            Tensor tAgA = thr_copy_a.partition_S(local_tile(mA, cta_tiler, coord, Step<_1, X, _1>{}));
            Tensor tBgB = thr_copy_b.partition_S(local_tile(mB, cta_tiler, coord, Step<X, _1, _1>{}));
            CUTE_NO_UNROLL
            for (int k_tile = 0; k_tile < k_tiles; ++k_tile, ++it) {
                const int stage = it % STAGES;
                // A fresh barrier passes a wait on parity 1, so the first round of stages is free.
                Barrier::wait(&empty[stage], ((it / STAGES) & 1) ^ 1);
                copy(copy_a, tAgA(_, _, _, k_tile), tAsA(_, _, _, stage));
                copy(copy_b, tBgB(_, _, _, k_tile), tBsB(_, _, _, stage));
                cutlass::arch::cpasync_barrier_arrive_noinc(&full[stage]);
            }
        }
        cp_async_wait<0>();
    } else {
#if WGM > 1
        cutlass::arch::warpgroup_reg_alloc<CONSUMER_REGS>();
#endif
        TiledMMA mma = make_tiled_mma(
            GMMA::ss_op_selector<T, T, float, Shape<Int<BM / WGM>, Int<BN>, Int<BK>>, GMMA::Major::K,
                                 GMMA::Major::MN>(),
            Layout<Shape<Int<WGM>, _1, _1>>{});
        ThrMMA thr_mma = mma.get_slice(threadIdx.x - 128);
        Tensor tCsA = thr_mma.partition_A(sA);
        Tensor tCsB = thr_mma.partition_B(sB);
        Tensor tCrA = thr_mma.make_fragment_A(tCsA);
        Tensor tCrB = thr_mma.make_fragment_B(tCsB);
        Tensor tCrC = thr_mma.make_fragment_C(
            thr_mma.partition_C(local_tile(mC, cta_tiler, tile_coord(0), Step<_1, _1, X>{})));   // shape only
        Tensor tCrC_half = make_fragment_like<T>(tCrC);
        const bool signals = (threadIdx.x % 32) == 0;
        int it = 0;   // k-tiles consumed so far, as the producer counts them
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
            Tensor tCgC = thr_mma.partition_C(local_tile(mC, cta_tiler, tile_coord(tile), Step<_1, _1, X>{}));
            clear(tCrC);
            CUTE_NO_UNROLL
            for (int k_tile = 0; k_tile < k_tiles; ++k_tile, ++it) {
                const int stage = it % STAGES;
                Barrier::wait(&full[stage], (it / STAGES) & 1);
                // cp.async wrote the tile through the generic proxy; wgmma reads it through the async one.
                asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
                warpgroup_fence_operand(tCrC);
                warpgroup_arrive();
                cute::gemm(mma, tCrA(_, _, _, stage), tCrB(_, _, _, stage), tCrC);
                warpgroup_commit_batch();
                warpgroup_wait<OVERLAP>();
                warpgroup_fence_operand(tCrC);
                // The MMAs that read the released stage are complete in this warp.
                if (k_tile >= OVERLAP) {
                    __syncwarp();
                    if (signals)
                        Barrier::arrive(&empty[(it - OVERLAP) % STAGES]);
                }
            }
            warpgroup_wait<0>();
            warpgroup_fence_operand(tCrC);
            if (OVERLAP) {   // the tile's last stage, left in flight above
                __syncwarp();
                if (signals)
                    Barrier::arrive(&empty[(it - 1) % STAGES]);
            }

            // The producer fills the next tile's stages meanwhile. Each thread's accumulators come in
            // pairs of neighbouring columns: stored as 32-bit half2 writes.
            CUTE_UNROLL
            for (int i = 0; i < size(tCrC); ++i)
                tCrC_half(i) = T(tCrC(i));
            copy(AutoVectorizingCopyWithAssumedAlignment<32>{}, tCrC_half, tCgC);
        }
    }
}
