constexpr int ROWS_PER_STEP = 8;

extern "C" __global__ void column_sum(const float* x, float* out, int rows, int cols) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= cols) return;
    float sum = 0.0f;
    int r = 0;
    for (; r + ROWS_PER_STEP <= rows; r += ROWS_PER_STEP) {
#pragma unroll 8
        for (int k = 0; k < ROWS_PER_STEP; ++k) sum += x[(long long)(r + k) * cols + col];
    }
    for (; r < rows; ++r) sum += x[(long long)r * cols + col];
    out[col] = sum;
}
