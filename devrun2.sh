#!/bin/bash
export PYTHONPATH=$PWD
T0=$(date +%s)
timeout 480 python tools/opinfo_sweep.py --device cuda --dtypes float32 bfloat16 --samples 2 --backends minductor --jobs 6 -q --json $OUT/sweep_cuda.json > $OUT/sweep.log 2>&1 &
python tools/profile_model.py mobilenet_v3_large inference bf16 /tmp/p host minductor > $OUT/host_mnv3_min.log 2>&1
python tools/profile_model.py mobilenet_v3_large inference bf16 /tmp/p host inductor > $OUT/host_mnv3_ind.log 2>&1
echo "host profiles: $(( $(date +%s) - T0 )) s"
timeout 200 python tools/profile_model.py convnext_tiny inference bf16 /tmp/p > $OUT/prof_convnext.log 2>&1
tail -n 6 $OUT/prof_convnext.log
timeout 150 python tools/cudagraph_bench.py > $OUT/cg.log 2>&1; tail -n 12 $OUT/cg.log
cd /tmp && tar czf $OUT/p.tgz p; cd - >/dev/null
wait
echo "all: $(( $(date +%s) - T0 )) s"
python tools/opinfo_sweep.py --report $OUT/sweep_cuda.json 2>&1 | tail -40
