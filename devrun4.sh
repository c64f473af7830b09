#!/bin/bash
export PYTHONPATH=$PWD
T0=$(date +%s)
timeout 100 python tools/host_breakdown.py mobilenet_v3_large inference bf16 > $OUT/hb_min.log 2>&1; grep "|\|step" $OUT/hb_min.log | head -14
timeout 100 python tools/host_breakdown.py mobilenet_v3_large inference bf16 inductor > $OUT/hb_ind.log 2>&1; grep "|\|step" $OUT/hb_ind.log | head -12
echo "host: $(( $(date +%s) - T0 )) s"
timeout 330 python -m minductor.models --models resnet50 mobilenet_v3_large convnext_tiny --mode inference --dtype bf16 --timeout 150 --json $OUT/conv_inf.json > $OUT/conv_inf.log 2>&1; grep "^|" $OUT/conv_inf.log | cut -c1-230 | head -14
echo "suite: $(( $(date +%s) - T0 )) s"
timeout 120 python tools/opinfo_sweep.py --device cuda --ops logcumsumexp index_put _efficient_attention_forward _flash_attention_forward --dtypes float32 float16 bfloat16 float64 int32 int64 bool --backends minductor --jobs 8 -q --json $OUT/sweep_t.json > $OUT/sweep_t.log 2>&1
python tools/opinfo_sweep.py --report $OUT/sweep_t.json 2>&1 | tail -14
timeout 100 python -m pytest -m cuda -q -p no:cacheprovider -rf tests/test_indexing.py tests/test_ch01_capture.py tests/test_ch12_layouts.py -k "cpu_index or bias or trace or propagates" 2>&1 | tail -4
echo "all: $(( $(date +%s) - T0 )) s"
