// Softened gravitational accelerations of N bodies, all pairs (nbody):
//   acc[i] = sum_j m_j (p_j - p_i) / (|p_j - p_i|^2 + eps^2)^(3/2),   pos[j] = (x, y, z, m)
// Compute-bound: N^2 interactions of about 20 flops each against 28 bytes a body.
//
// Knobs (the variant's #define lines come before this text):
//   ALGO_global   each thread reads body j through the cache (__ldg); a warp's threads read the same
//                 j at once, so each load is one broadcast
//   ALGO_smem     the block stages BLOCK bodies at a time in shared memory, one per thread, and every
//                 thread walks the tile (the GPU Gems 3 "tile" scheme)
//   BLOCK         threads per block
//   BPT           bodies per thread: a thread holds BPT bodies i (BLOCK apart, so loads and stores
//                 stay coalesced) and uses each body j it reads BPT times, from registers
//   UNROLL        unrolling of the loop over j
//   SPLIT         the bodies j are cut into SPLIT slices, one per blockIdx.y: SPLIT times the blocks
//                 for small grids, at the price of atomic adds into acc (zeroed by a memset step
//                 first); SPLIT 1 stores acc directly
//   MATH_div      1 / (r2 * sqrtf(r2)): a correctly rounded square root and division
//   MATH_rsqrt    rsqrtf(r2) cubed: one approximate reciprocal square root (2 ulp)
#define EPS2 0.01f
// #pragma unroll does not expand macros; _Pragma with a stringised argument does
#define KL_PRAGMA(x) _Pragma(#x)
#define KL_UNROLL(n) KL_PRAGMA(unroll n)

__device__ __forceinline__ void interact(float3& a, const float4 p, const float4 q)
{
    const float dx = q.x - p.x, dy = q.y - p.y, dz = q.z - p.z;
    const float r2 = fmaf(dx, dx, fmaf(dy, dy, fmaf(dz, dz, EPS2)));
#if defined(MATH_rsqrt)
    const float inv = rsqrtf(r2);
    const float s = q.w * (inv * inv * inv);
#else
    const float s = q.w / (r2 * sqrtf(r2));
#endif
    a.x = fmaf(dx, s, a.x);
    a.y = fmaf(dy, s, a.y);
    a.z = fmaf(dz, s, a.z);
}

extern "C" __global__ void __launch_bounds__(BLOCK)
nbody_family(const float4* __restrict__ pos, float* __restrict__ acc, int n)
{
    const int first = blockIdx.x * BLOCK * BPT + threadIdx.x;
    // this block's slice of the bodies j
    const int slice = (n + SPLIT - 1) / SPLIT;
    const int jbeg = blockIdx.y * slice;
    const int jend = min(n, jbeg + slice);

    float4 p[BPT];
    float3 a[BPT];
#pragma unroll
    for (int k = 0; k < BPT; ++k) {
        const int i = first + k * BLOCK;
        // a body past the end is computed on a copy of body 0 and never stored
        p[k] = pos[i < n ? i : 0];
        a[k] = make_float3(0.0f, 0.0f, 0.0f);
    }

#if defined(ALGO_smem)
    __shared__ float4 tile[BLOCK];
    for (int base = jbeg; base < jend; base += BLOCK) {
        const int j = base + threadIdx.x;
        // a zero-mass body pads the last tile: it adds nothing (r2 >= eps^2)
        tile[threadIdx.x] = j < jend ? pos[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        __syncthreads();
KL_UNROLL(UNROLL)
        for (int t = 0; t < BLOCK; ++t) {
            const float4 q = tile[t];
#pragma unroll
            for (int k = 0; k < BPT; ++k) interact(a[k], p[k], q);
        }
        __syncthreads();
    }
#else
KL_UNROLL(UNROLL)
    for (int j = jbeg; j < jend; ++j) {
        const float4 q = __ldg(&pos[j]);
#pragma unroll
        for (int k = 0; k < BPT; ++k) interact(a[k], p[k], q);
    }
#endif

#pragma unroll
    for (int k = 0; k < BPT; ++k) {
        const int i = first + k * BLOCK;
        if (i < n) {
#if SPLIT == 1
            acc[3 * i] = a[k].x;
            acc[3 * i + 1] = a[k].y;
            acc[3 * i + 2] = a[k].z;
#else
            atomicAdd(&acc[3 * i], a[k].x);
            atomicAdd(&acc[3 * i + 1], a[k].y);
            atomicAdd(&acc[3 * i + 2], a[k].z);
#endif
        }
    }
}
