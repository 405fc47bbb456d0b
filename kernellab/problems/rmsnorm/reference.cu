// RMSNorm over rows, fp32: y[r, c] = x[r, c] / sqrt(mean(x[r, :]^2) + 1e-6) * w[c].
// One block of 256 threads per row: a sum of squares reduced in a shared-memory tree, then a
// second pass over the row that writes.
extern "C" __global__ void rmsnorm_rows(const float* __restrict__ x, const float* __restrict__ w,
                                        float* __restrict__ y, int R, int C)
{
    __shared__ float s[256];
    const int row = blockIdx.x;
    const float* xr = x + (size_t)row * C;
    float* yr = y + (size_t)row * C;

    float ss = 0.0f;
    for (int j = threadIdx.x; j < C; j += 256) ss += xr[j] * xr[j];
    s[threadIdx.x] = ss;
    __syncthreads();
    for (int stride = 128; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }
    const float scale = 1.0f / sqrtf(s[0] / C + 1e-6f);
    for (int j = threadIdx.x; j < C; j += 256) yr[j] = xr[j] * scale * w[j];
}
