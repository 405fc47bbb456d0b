extern "C" __global__ void box3x3(const float* img, float* out, int h, int w) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    float sum = 0.0f;
    for (int dy = -1; dy <= 1; ++dy) {
        for (int dx = -1; dx <= 1; ++dx) {
            int yy = min(max(y + dy, 0), h - 1);
            int xx = min(max(x + dx, 0), w - 1);
            sum += img[yy * w + xx];
        }
    }
    out[y * w + x] = sum * (1.0f / 9.0f);
}
