import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

// One thread per output element reading its row of A and column of B from global memory.
__global__ void kl_tiled_mm_relu(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                                 int m, int k, int n) {
    int row = blockIdx.y * 32 + threadIdx.y, col = blockIdx.x * 32 + threadIdx.x;
    if (row >= m || col >= n) return;
    float acc = 0.f;
    for (int i = 0; i < k; ++i) acc += a[(long)row * k + i] * b[(long)i * n + col];
    c[(long)row * n + col] = fmaxf(acc, 0.f);
}

torch::Tensor mm_relu(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda() && a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32,
                "a, b: float32 CUDA");
    a = a.contiguous();
    b = b.contiguous();
    int m = (int)a.size(0), k = (int)a.size(1), n = (int)b.size(1);
    auto c = torch::empty({m, n}, a.options());
    dim3 block(32, 32), grid((n + 31) / 32, (m + 31) / 32);
    kl_tiled_mm_relu<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), m, k, n);
    return c;
}
"""
cpp_source = "torch::Tensor mm_relu(torch::Tensor a, torch::Tensor b);"
fused = load_inline(name="kl_mm_relu_naive", cpp_sources=cpp_source, cuda_sources=cuda_source,
                    functions=["mm_relu"], extra_cuda_cflags=["-O3"], verbose=False)

M = 1024
K = 1024
N = 1024


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return fused.mm_relu(a, b)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
