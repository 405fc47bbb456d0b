// HGEMM reference: C = A * B, row-major fp16, A is M x K, B is K x N, fp32 accumulation.
// One thread per element of C, reading A and B straight from global memory (no tensor cores).
#include <cuda_fp16.h>

extern "C" __global__ void hgemm_naive(const __half* __restrict__ A, const __half* __restrict__ B,
                                       __half* __restrict__ C, int M, int N, int K)
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k)
        acc += __half2float(A[(size_t)row * K + k]) * __half2float(B[(size_t)k * N + col]);
    C[(size_t)row * N + col] = __float2half(acc);
}
