// out[c, y, x] = max of in[c, 2y + a - 1, 2x + b - 1] over a, b in 0..2, taps outside the image left out:
// 3 x 3 max pooling with stride 2 and padding 1 over a C x H x W fp32 tensor (output C x ceil(H/2) x
// ceil(W/2)). One thread per output; every tap is a bounds-checked global load.
#define NEG_INF __int_as_float(0xff800000)  // -inf, without a header (NVRTC has none)
extern "C" __global__ void maxpool_naive(const float* __restrict__ in, float* __restrict__ out, int C, int H, int W)
{
    const int OH = (H + 1) / 2, OW = (W + 1) / 2;
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    const int c = blockIdx.z;
    if (y >= OH || x >= OW) return;
    const float* img = in + (size_t)c * H * W;
    float m = NEG_INF;
    for (int a = 0; a < 3; ++a) {
        for (int b = 0; b < 3; ++b) {
            const int yy = 2 * y + a - 1, xx = 2 * x + b - 1;
            if (yy >= 0 && yy < H && xx >= 0 && xx < W) m = fmaxf(m, img[(size_t)yy * W + xx]);
        }
    }
    out[(size_t)c * OH * OW + (size_t)y * OW + x] = m;
}
