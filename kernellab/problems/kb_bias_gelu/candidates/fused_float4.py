import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__device__ __forceinline__ float kl_gelu(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

// One float4 per thread; cols is a multiple of 4, so a float4 never crosses a row.
__global__ void kl_bias_gelu_vec4(const float4* __restrict__ x, const float4* __restrict__ bias,
                                  float4* __restrict__ y, long n4, int cols4) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i >= n4) return;
    float4 v = x[i];
    float4 b = bias[i % cols4];
    y[i] = make_float4(kl_gelu(v.x + b.x), kl_gelu(v.y + b.y), kl_gelu(v.z + b.z), kl_gelu(v.w + b.w));
}

torch::Tensor bias_gelu(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x: contiguous float32 CUDA");
    TORCH_CHECK(x.size(-1) % 4 == 0, "the row length must be a multiple of 4");
    auto y = torch::empty_like(x);
    long n4 = x.numel() / 4;
    int cols4 = (int)(x.size(-1) / 4);
    int threads = 256;
    long blocks = (n4 + threads - 1) / threads;
    kl_bias_gelu_vec4<<<(unsigned)blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        reinterpret_cast<const float4*>(x.data_ptr<float>()), reinterpret_cast<const float4*>(bias.data_ptr<float>()),
        reinterpret_cast<float4*>(y.data_ptr<float>()), n4, cols4);
    return y;
}
"""
cpp_source = "torch::Tensor bias_gelu(torch::Tensor x, torch::Tensor bias);"
fused = load_inline(name="kl_bias_gelu_float4", cpp_sources=cpp_source, cuda_sources=cuda_source,
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
