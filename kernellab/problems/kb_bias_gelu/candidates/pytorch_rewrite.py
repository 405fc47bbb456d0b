import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS = 8192
COLS = 4096


class ModelNew(nn.Module):
    """No kernel of its own: the same two PyTorch ops in another spelling (the guard must say so)."""

    def __init__(self, cols):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(cols) * 0.1)

    def forward(self, x):
        return F.gelu(torch.add(x, self.bias), approximate="none")


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [COLS]
