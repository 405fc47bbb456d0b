import torch
import torch.nn as nn

M = 1024
K = 1024
N = 1024


class Model(nn.Module):
    """relu(A @ B)."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.relu(a @ b)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
