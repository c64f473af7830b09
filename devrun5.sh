#!/bin/bash
export PYTHONPATH=$PWD
T0=$(date +%s)
timeout 110 python tools/host_breakdown.py mobilenet_v3_large inference bf16 > $OUT/hb_min.log 2>&1; grep "|\|step\|diagnosis\|single" $OUT/hb_min.log | head -20
timeout 110 python tools/host_breakdown.py mobilenet_v3_large inference bf16 inductor > $OUT/hb_ind.log 2>&1; grep "|\|step\|diagnosis\|single" $OUT/hb_ind.log | head -14
echo "host: $(( $(date +%s) - T0 )) s"
timeout 340 python tools/opinfo_sweep.py --device cuda --dtypes float32 float16 bfloat16 float64 int32 int64 bool --samples 2 --backends minductor --jobs 14 -q --json $OUT/sweep_cuda7.json > $OUT/sweep7.log 2>&1
python tools/opinfo_sweep.py --report $OUT/sweep_cuda7.json 2>&1 | tail -25
echo "all: $(( $(date +%s) - T0 )) s"
