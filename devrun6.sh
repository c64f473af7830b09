#!/bin/bash
export PYTHONPATH=$PWD
for m in convnext_tiny mobilenet_v3_large; do
for b in minductor inductor; do
timeout 110 python tools/host_breakdown.py $m inference bf16 $b > $OUT/hb_${m}_$b.log 2>&1; grep "|\|step\|diagnosis\|single" $OUT/hb_${m}_$b.log | cut -c1-400 | head -16
done; done
