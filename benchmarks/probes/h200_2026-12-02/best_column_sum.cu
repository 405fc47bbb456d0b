#define RESTRICT 1
#define LDG 1
#define MINB 0
// Written by KernelLab's read-only-path recipe: __restrict__, __ldg and __launch_bounds__ as knobs.
#if RESTRICT
#define KL_RESTRICT __restrict__
#else
#define KL_RESTRICT
#endif
#if LDG
#define KL_READ(value) __ldg(&(value))
#else
#define KL_READ(value) (value)
#endif
#if MINB > 0
#define KL_BOUNDS __launch_bounds__(1024, MINB)
#else
#define KL_BOUNDS __launch_bounds__(1024)
#endif
#define TILE_C 32
#define TILE_R 32
#define SPLIT 1
// Written by KernelLab's column-tile recipe: TILE_C columns per block, their rows split over
// TILE_R threads each, the partial results combined in shared memory.
template <int KIND, typename T> __device__ __forceinline__ T kl_pick(T a, T b) {
    if constexpr (KIND == 0) return a + b;
    else if constexpr (KIND == 1) return a > b ? a : b;
    else return a < b ? a : b;
}
template <int KIND, typename T> __device__ __forceinline__ T kl_tile_combine(T v) {
    __shared__ T kl_partial[TILE_R][TILE_C];
    kl_partial[threadIdx.y][threadIdx.x] = v;
    __syncthreads();
#pragma unroll
    for (int kl_half = TILE_R / 2; kl_half > 0; kl_half >>= 1) {
        if (threadIdx.y < kl_half)
            kl_partial[threadIdx.y][threadIdx.x] = kl_pick<KIND>(kl_partial[threadIdx.y][threadIdx.x],
                                                                 kl_partial[threadIdx.y + kl_half][threadIdx.x]);
        __syncthreads();
    }
    const T total = kl_partial[0][threadIdx.x];
    __syncthreads();  // the next combine reuses kl_partial
    return total;
}
template <typename T> __device__ __forceinline__ T kl_tile_sum(T v) { return kl_tile_combine<0>(v); }
template <typename T> __device__ __forceinline__ T kl_tile_max(T v) { return kl_tile_combine<1>(v); }
template <typename T> __device__ __forceinline__ T kl_tile_min(T v) { return kl_tile_combine<2>(v); }
constexpr int ROWS_PER_STEP = 8;

extern "C" __global__ KL_BOUNDS void column_sum(const float* KL_RESTRICT x, float* KL_RESTRICT out, int rows, int cols) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int kl_lane = blockIdx.y * TILE_R + threadIdx.y;
    const bool kl_active = col < (cols);
    float sum = 0.0f;
    int r = 0;
    if (kl_active) {
    for (r += kl_lane * (ROWS_PER_STEP); r + ROWS_PER_STEP <= rows; r += (TILE_R * SPLIT) * (ROWS_PER_STEP)) {
#pragma unroll 8
        for (int k = 0; k < ROWS_PER_STEP; ++k) sum += KL_READ(x[(long long)(r + k) * cols + col]);
    }
    for (; r < rows; ++r) sum += KL_READ(x[(long long)r * cols + col]);
    }
    sum = kl_tile_sum(sum);
    if (col >= cols) return;
    #if SPLIT > 1
    if (threadIdx.y == 0) atomicAdd(&out[col], sum);
#else
    out[col] = sum;
#endif
}
