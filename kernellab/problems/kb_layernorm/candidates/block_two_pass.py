import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

// One block per row: the mean, then the variance about it, then the normalised write.
__global__ void kl_layernorm_rows(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                                  float* __restrict__ y, int rows, int cols, float eps) {
    __shared__ float scratch[32];
    const float* in = x + (long)blockIdx.x * cols;
    float* out = y + (long)blockIdx.x * cols;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    float s = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += in[c];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) scratch[warp] = s;
    __syncthreads();
    s = 0.f;
    for (int i = 0; i < warps; ++i) s += scratch[i];
    float mean = s / cols;
    __syncthreads();
    float q = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) { float d = in[c] - mean; q += d * d; }
    for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
    if (lane == 0) scratch[warp] = q;
    __syncthreads();
    q = 0.f;
    for (int i = 0; i < warps; ++i) q += scratch[i];
    float rstd = rsqrtf(q / cols + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = (in[c] - mean) * rstd * w[c] + b[c];
}

torch::Tensor layernorm_rows(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x: contiguous float32 CUDA");
    auto y = torch::empty_like(x);
    int cols = (int)x.size(-1);
    int rows = (int)(x.numel() / cols);
    kl_layernorm_rows<<<(unsigned)rows, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), rows, cols, (float)eps);
    return y;
}
"""
cpp_source = "torch::Tensor layernorm_rows(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps);"
norm = load_inline(name="kl_layernorm_block_two_pass", cpp_sources=cpp_source, cuda_sources=cuda_source,
                   functions=["layernorm_rows"], extra_cuda_cflags=["-O3"], verbose=False)

ROWS = 8192
FEATURES = 1024


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.norm = nn.LayerNorm(features, eps=1e-5)
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(features))
            self.norm.bias.copy_(0.1 * torch.randn(features))

    def forward(self, x):
        return norm.layernorm_rows(x.contiguous(), self.norm.weight, self.norm.bias, self.norm.eps)


def get_inputs():
    return [torch.randn(ROWS, FEATURES) * 2.0 + 0.5]


def get_init_inputs():
    return [FEATURES]
