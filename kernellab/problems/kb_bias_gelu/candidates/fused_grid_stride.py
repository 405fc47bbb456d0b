import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void kl_bias_gelu(const float* __restrict__ x, const float* __restrict__ bias,
                             float* __restrict__ y, long n, int cols) {
    long stride = (long)gridDim.x * blockDim.x;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = x[i] + bias[i % cols];
        y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}

torch::Tensor bias_gelu(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x: contiguous float32 CUDA");
    auto y = torch::empty_like(x);
    long n = x.numel();
    int cols = (int)x.size(-1);
    int threads = 256;
    long blocks = (n + threads - 1) / threads;
    if (blocks > 132L * 64) blocks = 132L * 64;
    kl_bias_gelu<<<(int)blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), n, cols);
    return y;
}
"""
cpp_source = "torch::Tensor bias_gelu(torch::Tensor x, torch::Tensor bias);"
fused = load_inline(name="kl_bias_gelu_grid_stride", cpp_sources=cpp_source, cuda_sources=cuda_source,
                    functions=["bias_gelu"], extra_cuda_cflags=["-O3"], verbose=False)

ROWS = 8192
COLS = 4096


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(cols) * 0.1)

    def forward(self, x):
        return fused.bias_gelu(x.contiguous(), self.bias.contiguous())


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [COLS]
