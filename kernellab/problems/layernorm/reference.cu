// LayerNorm over rows, fp32: y[r, c] = (x[r, c] - mean_r) / sqrt(var_r + 1e-5) * w[c] + b[c],
// with the biased variance var_r = mean((x[r, :] - mean_r)^2).
// One block of 256 threads per row and three passes over the row in global memory: the sum for
// the mean, the sum of centred squares for the variance (each reduced in a shared-memory tree),
// then a pass that writes.
extern "C" __global__ void layernorm_rows(const float* __restrict__ x, const float* __restrict__ w,
                                          const float* __restrict__ b, float* __restrict__ y, int R, int C)
{
    __shared__ float s[256];
    const int row = blockIdx.x;
    const float* xr = x + (size_t)row * C;
    float* yr = y + (size_t)row * C;

    float sum = 0.0f;
    for (int j = threadIdx.x; j < C; j += 256) sum += xr[j];
    s[threadIdx.x] = sum;
    __syncthreads();
    for (int stride = 128; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }
    const float mean = s[0] / C;
    __syncthreads();   // every thread has read s[0] before the tree is used again

    float sq = 0.0f;
    for (int j = threadIdx.x; j < C; j += 256) {
        const float d = xr[j] - mean;
        sq += d * d;
    }
    s[threadIdx.x] = sq;
    __syncthreads();
    for (int stride = 128; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }
    const float rstd = 1.0f / sqrtf(s[0] / C + 1e-5f);
    for (int j = threadIdx.x; j < C; j += 256) yr[j] = (xr[j] - mean) * rstd * w[j] + b[j];
}
