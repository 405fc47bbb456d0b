// out[c] = in[c] (*) w[c]: a 3 x 3 filter per channel over a C x H x W fp32 tensor, zero outside each image
// (cross-correlation, as deep-learning frameworks define a depthwise convolution). One thread per output;
// every tap is a bounds-checked global load, and the weights are read from global memory too.
extern "C" __global__ void depthwise_naive(const float* __restrict__ in, const float* __restrict__ w, float* __restrict__ out,
                                           int C, int H, int W)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    const int c = blockIdx.z;
    if (y >= H || x >= W) return;
    const float* img = in + (size_t)c * H * W;
    float acc = 0.0f;
    for (int a = 0; a < 3; ++a) {
        for (int b = 0; b < 3; ++b) {
            const int yy = y + a - 1, xx = x + b - 1;
            if (yy >= 0 && yy < H && xx >= 0 && xx < W) acc += w[c * 9 + a * 3 + b] * img[(size_t)yy * W + xx];
        }
    }
    out[(size_t)c * H * W + (size_t)y * W + x] = acc;
}
