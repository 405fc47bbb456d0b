#define CACHE 32
// Written by KernelLab's row-cache recipe: a row read by several passes, read once.
#define WARPS 1
// Written by KernelLab's warp-per-row recipe: a row's columns over the 32 lanes of a warp.
template <typename T> __device__ __forceinline__ T kl_warp_sum(T v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}
template <typename T> __device__ __forceinline__ T kl_warp_max(T v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) { T other = __shfl_xor_sync(0xffffffffu, v, offset); v = other > v ? other : v; }
    return v;
}
template <typename T> __device__ __forceinline__ T kl_warp_min(T v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) { T other = __shfl_xor_sync(0xffffffffu, v, offset); v = other < v ? other : v; }
    return v;
}
extern "C" __global__ void row_softmax(const float* x, float* out, int rows, int cols) {
    const long long kl_thread = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const int kl_lane = threadIdx.x % 32;
    int row = (int)(kl_thread / 32);
    if (row >= rows) return;
    const float* in = x + (long long)row * cols;
    float largest = __int_as_float(0xff800000);  // -inf without math.h, which NVRTC does not include
    // row cache: in read once, kept in registers for the later passes
    float kl_row_in[CACHE];
    const bool kl_fits = (cols) <= (kl_lane + (0)) + CACHE * (32);
    if (kl_fits) {
#pragma unroll
    for (int kl_k = 0; kl_k < CACHE; ++kl_k) {
        int c = (kl_lane + (0)) + kl_k * (32);
        if (c < (cols)) { kl_row_in[kl_k] = in[c]; largest = fmaxf(largest, kl_row_in[kl_k]); }
    }
    } else for (int c = kl_lane + (0); c < cols; c += 32) largest = fmaxf(largest, in[c]);
    largest = kl_warp_max(largest);
    float total = 0.0f;
    if (kl_fits) {
#pragma unroll
    for (int kl_k = 0; kl_k < CACHE; ++kl_k) {
        int c = (kl_lane + (0)) + kl_k * (32);
        if (c < (cols)) { total += __expf(kl_row_in[kl_k] - largest); }
    }
    } else for (int c = kl_lane + (0); c < cols; c += 32) total += __expf(in[c] - largest);
    total = kl_warp_sum(total);
    float* result = out + (long long)row * cols;
    if (kl_fits) {
#pragma unroll
    for (int kl_k = 0; kl_k < CACHE; ++kl_k) {
        int c = (kl_lane + (0)) + kl_k * (32);
        if (c < (cols)) { result[c] = __expf(kl_row_in[kl_k] - largest) / total; }
    }
    } else for (int c = kl_lane + (0); c < cols; c += 32) result[c] = __expf(in[c] - largest) / total;
}
