#!/bin/bash
export PYTHONPATH=$PWD
T0=$(date +%s)
timeout 520 python tools/opinfo_sweep.py --device cuda --dtypes float32 float16 bfloat16 float64 int32 int64 bool --samples 2 --backends minductor --jobs 10 -q --json $OUT/sweep_cuda7.json > $OUT/sweep7.log 2>&1 &
(timeout 400 python -m pytest -m cuda -q -p no:cacheprovider -rf tests/test_ch12_layouts.py tests/test_scans.py tests/test_edge_cases.py tests/test_sizing.py > $OUT/tests.log 2>&1; echo "rc=$?" >> $OUT/tests.log) &
python - <<'PY' > $OUT/lcse.log 2>&1
import torch
import minductor
x = torch.randn(5, 5, 5, device="cuda", dtype=torch.float64) * 3
for dt in (torch.float32,):
    a = x.to(dt).requires_grad_()
    b = x.clone().requires_grad_()
    w = torch.randn_like(x)
    f = lambda t: torch.logcumsumexp(t, 2)
    g_c, = torch.autograd.grad((torch.compile(f, backend="minductor")(a) * w.to(dt)).sum(), a)
    g_e, = torch.autograd.grad((f(a) * w.to(dt)).sum(), a)
    a2 = x.to(dt).requires_grad_()
    g_r, = torch.autograd.grad((f(b) * w).sum(), b)
    print("compiled vs fp64", (g_c.double() - g_r).abs().max().item(), "eager vs fp64", (g_e.double() - g_r).abs().max().item())
PY
cat $OUT/lcse.log | tail -3
timeout 150 python tools/host_breakdown.py mobilenet_v3_large inference bf16 > $OUT/hb_mnv3.log 2>&1; cat $OUT/hb_mnv3.log | grep -v "^\s*$" | tail -40
timeout 150 python tools/host_breakdown.py convnext_tiny inference bf16 > $OUT/hb_cnx.log 2>&1; grep "|\|step" $OUT/hb_cnx.log | head -20
wait
echo "all: $(( $(date +%s) - T0 )) s"
tail -n 3 $OUT/tests.log; grep "^FAILED" $OUT/tests.log
python tools/opinfo_sweep.py --report $OUT/sweep_cuda7.json 2>&1 | tail -30
