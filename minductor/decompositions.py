# generated from chapters/02_decompositions.md — edit there

from __future__ import annotations

from typing import Callable

import torch
from torch._ops import OpOverload, OpOverloadPacket

aten = torch.ops.aten

decompositions: dict[OpOverload, Callable[..., object]] = {}


def _overloads(op: OpOverload | OpOverloadPacket) -> list[OpOverload]:
    if isinstance(op, OpOverloadPacket):
        return [getattr(op, name) for name in op.overloads()]
    return [op]


def register_decomposition(*ops_: OpOverload | OpOverloadPacket):
    def decorator(fn: Callable[..., object]) -> Callable[..., object]:
        for op in ops_:
            for overload in _overloads(op):
                decompositions[overload] = fn
        return fn

    return decorator


@register_decomposition(aten.addcmul)
def addcmul(self, tensor1, tensor2, *, value=1):
    return self + value * tensor1 * tensor2


@register_decomposition(aten.addcdiv)
def addcdiv(self, tensor1, tensor2, *, value=1):
    return self + value * (tensor1 / tensor2)


@register_decomposition(aten.lerp.Scalar, aten.lerp.Tensor)
def lerp(start, end, weight):
    return start + weight * (end - start)


@register_decomposition(aten.hardtanh)
def hardtanh(x, min_val=-1.0, max_val=1.0):
    return torch.clamp(x, min_val, max_val)


@register_decomposition(aten.hardsigmoid)
def hardsigmoid(x):
    return torch.clamp(x / 6 + 0.5, 0.0, 1.0)


@register_decomposition(aten.hardswish)
def hardswish(x):
    return x * torch.clamp(x / 6 + 0.5, 0.0, 1.0)


@register_decomposition(aten.leaky_relu)
def leaky_relu(x, negative_slope=0.01):
    return torch.where(x > 0, x, x * negative_slope)


@register_decomposition(aten.rsub.Tensor, aten.rsub.Scalar)
def rsub(self, other, alpha=1):
    return other - alpha * self


@register_decomposition(aten.full_like)
def full_like(
    x,
    fill_value,
    *,
    dtype=None,
    layout=None,
    device=None,
    pin_memory=None,
    memory_format=None,
):
    return torch.full(
        x.shape, fill_value, dtype=dtype or x.dtype, device=device or x.device
    )


@register_decomposition(aten.zeros_like)
def zeros_like(
    x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None
):
    return full_like(x, 0, dtype=dtype, device=device)


@register_decomposition(aten.ones_like)
def ones_like(
    x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None
):
    return full_like(x, 1, dtype=dtype, device=device)


@register_decomposition(aten.softplus)
def softplus(x, beta=1, threshold=20):
    scaled = x * beta
    return torch.where(scaled > threshold, x, torch.log1p(torch.exp(scaled)) / beta)


_BORROWED = [
    aten.elu,
    aten.mish,
    aten.sigmoid_backward,
    aten.tanh_backward,
    aten.threshold_backward,
    aten.silu_backward,
    aten.gelu_backward,
    aten.hardtanh_backward,
    aten.leaky_relu_backward,
]


def decomposition_table() -> dict[OpOverload, Callable[..., object]]:
    from torch._decomp import get_decompositions

    table = dict(get_decompositions(_BORROWED))
    table.update(decompositions)
    return table
