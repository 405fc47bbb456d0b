// Row softmax, fp32: y[r, :] = exp(x[r, :] - max) / sum(exp(x[r, :] - max)).
// One block of 256 threads per row and three passes over the row (max, sum, write), each
// reduced with a shared-memory tree.
extern "C" __global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, int R, int C)
{
    __shared__ float s[256];
    const int row = blockIdx.x;
    const float* xr = x + (size_t)row * C;
    float* yr = y + (size_t)row * C;

    float m = -3.402823466e38f;
    for (int j = threadIdx.x; j < C; j += 256) m = fmaxf(m, xr[j]);
    s[threadIdx.x] = m;
    __syncthreads();
    for (int stride = 128; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) s[threadIdx.x] = fmaxf(s[threadIdx.x], s[threadIdx.x + stride]);
        __syncthreads();
    }
    m = s[0];
    __syncthreads();

    float sum = 0.0f;
    for (int j = threadIdx.x; j < C; j += 256) sum += expf(xr[j] - m);
    s[threadIdx.x] = sum;
    __syncthreads();
    for (int stride = 128; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }
    sum = s[0];

    for (int j = threadIdx.x; j < C; j += 256) yr[j] = expf(xr[j] - m) / sum;
}
