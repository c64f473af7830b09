"""Cases where eager's rules differ from the obvious kernel: booleans that add as a
logical or, integer powers that a floating-point pow would round, reductions of a 0-d
tensor over its "dimension 0". Each compiled result must be eager's exactly, or the op
must go to ATen (and say so)."""

import pytest
import torch
from helpers import DEVICES, run

pytestmark = [pytest.mark.e2e, pytest.mark.ch06]


BOOL_ARITHMETIC = {
    "add": lambda a, b: a + b,  # a logical or: True + True is True
    "add alpha=True": lambda a, b: torch.add(a, b, alpha=True),
    "mul": lambda a, b: a * b,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "add then sum": lambda a, b: (a + b).sum(),
    "add with int": lambda a, b: a + b.to(torch.int32),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(BOOL_ARITHMETIC))
def test_arithmetic_on_bool_tensors_is_eagers(case, device):
    a = torch.tensor([True, False, True, False, True], device=device)
    b = torch.tensor([True, True, False, False, True], device=device)
    _, fallbacks = run(BOOL_ARITHMETIC[case], a, b, atol=0, rtol=0)
    assert fallbacks == []


@pytest.mark.parametrize("device", DEVICES)
def test_integer_powers_are_exact_or_left_to_aten(device):
    base = torch.tensor([-3, -1, 0, 2, 5, 7, 3, 11], device=device)
    exponent = torch.tensor([0, 1, 2, 3, 1, 2, 20, 9], device=device)
    _, fallbacks = run(lambda b, e: b**e, base, exponent, atol=0, rtol=0)
    assert fallbacks == ["aten.pow.Tensor_Tensor"]  # a float pow: 5**1 may be 4
    _, fallbacks = run(lambda b: b**3 + b**19, base, atol=0, rtol=0)
    assert fallbacks == ["aten.pow.Tensor_Scalar"]  # 19: too many products to inline


ZERO_DIM = {
    "sum": lambda t: t.sum(0),
    "sum keepdim": lambda t: t.sum(-1, keepdim=True),
    "mean": lambda t: t.mean(0),
    "amax": lambda t: t.amax(0),
    "argmax": lambda t: t.argmax(0),
    "any": lambda t: t.any(0),
    "var": lambda t: t.var(0, correction=0),
    "logsumexp": lambda t: t.logsumexp(0),
    "squeeze": lambda t: (t * 2).squeeze(0),
    "prod": lambda t: t.prod(0),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(ZERO_DIM))
def test_reductions_of_a_0d_tensor_over_dim_0(case, device):
    x = torch.tensor(-3.5, device=device)
    _, fallbacks = run(ZERO_DIM[case], x, atol=0, rtol=0)
    assert fallbacks == []
