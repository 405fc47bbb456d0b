#define CHUNK 4

extern "C" __global__ void row_rmsnorm(const float* x, float* out, int rows, int cols) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float* in = x + (long long)row * cols;
    float sum = 0.0f;
    int c = 0;
    for (; c + CHUNK <= cols; c += CHUNK) {
#pragma unroll 4
        for (int k = 0; k < CHUNK; ++k) sum += in[c + k] * in[c + k];
    }
    for (; c < cols; ++c) sum += in[c] * in[c];
    float scale = rsqrtf(sum / cols + 1e-6f);
    for (int j = 0; j < cols; ++j) out[(long long)row * cols + j] = in[j] * scale;
}
