import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

// One block per row: a block-wide max, then a block-wide sum of exponentials, then the scaled write.
__global__ void kl_softmax_rows_block(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float scratch[32];
    const float* row = x + (long)blockIdx.x * cols;
    float* out = y + (long)blockIdx.x * cols;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) scratch[warp] = m;
    __syncthreads();
    m = scratch[0];
    for (int w = 1; w < warps; ++w) m = fmaxf(m, scratch[w]);
    __syncthreads();
    float s = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += __expf(row[c] - m);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) scratch[warp] = s;
    __syncthreads();
    s = 0.f;
    for (int w = 0; w < warps; ++w) s += scratch[w];
    float inv = 1.f / s;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = __expf(row[c] - m) * inv;
}

torch::Tensor softmax_rows(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.dim() == 2 && x.scalar_type() == torch::kFloat32,
                "x: contiguous 2-D float32 CUDA");
    auto y = torch::empty_like(x);
    kl_softmax_rows_block<<<(unsigned)x.size(0), 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), (int)x.size(1));
    return y;
}
"""
cpp_source = "torch::Tensor softmax_rows(torch::Tensor x);"
rows = load_inline(name="kl_softmax_block_per_row", cpp_sources=cpp_source, cuda_sources=cuda_source,
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
