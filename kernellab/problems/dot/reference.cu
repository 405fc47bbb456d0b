// Dot product of two N-float vectors in two launches: each block of 256 threads multiplies 256
// pairs, one a thread, sums the products with a shared-memory tree and writes one partial; a
// single block then sums the partials.
extern "C" __global__ void dot_partial(const float* __restrict__ x, const float* __restrict__ y,
                                       float* __restrict__ partials, int n)
{
    __shared__ float s[256];
    const int i = blockIdx.x * 256 + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] * y[i] : 0.0f;
    __syncthreads();
    for (int stride = 128; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) partials[blockIdx.x] = s[0];
}

extern "C" __global__ void dot_final(const float* __restrict__ partials, float* __restrict__ out, int count)
{
    __shared__ float s[1024];
    float acc = 0.0f;
    for (int i = threadIdx.x; i < count; i += 1024) acc += partials[i];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int stride = 512; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = s[0];
}
