// out = in (*) w: a 5 x 5 filter over an H x W fp32 image, zero outside the image
// (cross-correlation, as deep-learning frameworks define convolution). One thread per output;
// every tap is a bounds-checked global load, and the weights are read from global memory too.
extern "C" __global__ void conv2d_naive(const float* __restrict__ in, const float* __restrict__ w, float* __restrict__ out, int H, int W)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r >= H || c >= W) return;
    float acc = 0.0f;
    for (int a = 0; a < 5; ++a) {
        for (int b = 0; b < 5; ++b) {
            const int rr = r + a - 2, cc = c + b - 2;
            if (rr >= 0 && rr < H && cc >= 0 && cc < W) acc += w[a * 5 + b] * in[(size_t)rr * W + cc];
        }
    }
    out[(size_t)r * W + c] = acc;
}
