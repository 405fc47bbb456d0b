// GELU, tanh approximation, one thread per element in blocks of 256:
//   y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
extern "C" __global__ void gelu_tanh(const float* __restrict__ x, float* __restrict__ y, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float v = x[i];
        const float u = 0.7978845608f * (v + 0.044715f * v * v * v);
        y[i] = 0.5f * v * (1.0f + tanhf(u));
    }
}
