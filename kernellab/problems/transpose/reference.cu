// out = transpose(in): in is R x C, out is C x R, fp32 row-major. One thread per element;
// reads are coalesced along a row of in, writes stride by R through out.
extern "C" __global__ void transpose_naive(const float* __restrict__ in, float* __restrict__ out, int R, int C)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < R && c < C) out[(size_t)c * R + r] = in[(size_t)r * C + c];
}
