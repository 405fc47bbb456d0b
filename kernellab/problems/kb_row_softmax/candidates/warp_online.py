import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

// One warp per row, one read for the max and sum together (online softmax), one read for the write.
__global__ void kl_softmax_rows_warp(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const float* in = x + (long)row * cols;
    float* out = y + (long)row * cols;
    float m = -INFINITY, s = 0.f;
    for (int c = lane; c < cols; c += 32) {
        float v = in[c];
        if (v > m) { s = s * __expf(m - v) + 1.f; m = v; }
        else { s += __expf(v - m); }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        float mx = fmaxf(m, m2);
        s = s * __expf(m - mx) + s2 * __expf(m2 - mx);
        m = mx;
    }
    float inv = 1.f / s;
    for (int c = lane; c < cols; c += 32) out[c] = __expf(in[c] - m) * inv;
}

torch::Tensor softmax_rows(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.dim() == 2 && x.scalar_type() == torch::kFloat32,
                "x: contiguous 2-D float32 CUDA");
    auto y = torch::empty_like(x);
    int rows = (int)x.size(0);
    int warps_per_block = 8;
    kl_softmax_rows_warp<<<(rows + warps_per_block - 1) / warps_per_block, 32 * warps_per_block, 0,
                           at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), rows,
                                                               (int)x.size(1));
    return y;
}
"""
cpp_source = "torch::Tensor softmax_rows(torch::Tensor x);"
rows = load_inline(name="kl_softmax_warp_online", cpp_sources=cpp_source, cuda_sources=cuda_source,
                   functions=["softmax_rows"], extra_cuda_cflags=["-O3"], verbose=False)

ROWS = 8192
COLS = 2048


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return rows.softmax_rows(x.contiguous())


def get_inputs():
    return [torch.randn(ROWS, COLS) * 3.0]


def get_init_inputs():
    return []
