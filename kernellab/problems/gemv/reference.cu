// y = A x, fp32: A is M x K row-major, x has K elements, y has M. One thread per row walks
// its row of A in order, so the 32 threads of a warp read 32 different rows at each step, and
// 8192 rows make only 32 blocks of 256 threads.
extern "C" __global__ void gemv_rows(const float* __restrict__ A, const float* __restrict__ x, float* __restrict__ y, int M, int K)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M) return;
    const float* a = A + (size_t)row * K;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += a[k] * x[k];
    y[row] = acc;
}
