extern "C" __global__ void row_softmax(const float* x, float* out, int rows, int cols) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float* in = x + (long long)row * cols;
    float largest = __int_as_float(0xff800000);  // -inf without math.h, which NVRTC does not include
    for (int c = 0; c < cols; ++c) largest = fmaxf(largest, in[c]);
    float total = 0.0f;
    for (int c = 0; c < cols; ++c) total += __expf(in[c] - largest);
    float* result = out + (long long)row * cols;
    for (int c = 0; c < cols; ++c) result[c] = __expf(in[c] - largest) / total;
}
