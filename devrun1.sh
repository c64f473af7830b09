#!/bin/bash
# device run 1: CUDA tests in 4 shards, CUDA OpInfo sweep, then profiles
export PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python -c "import torch, triton, transformers, torchvision; print(torch.__version__, triton.__version__, transformers.__version__, torchvision.__version__)"
T0=$(date +%s)
for i in 0 1 2 3; do
  sel=$(ls tests/test_*.py | awk -v i=$i 'NR%4==i')
  (timeout 400 python -m pytest -m cuda -q -p no:cacheprovider -rf $sel > $OUT/tests_$i.log 2>&1; echo "rc=$?" >> $OUT/tests_$i.log) &
done
timeout 420 python tools/opinfo_sweep.py --device cuda --dtypes float32 bfloat16 --samples 2 --backends minductor --jobs 6 -q --json $OUT/sweep_cuda.json > $OUT/sweep.log 2>&1 &
wait
echo "tests+sweep: $(( $(date +%s) - T0 )) s"
for i in 0 1 2 3; do tail -n 2 $OUT/tests_$i.log; done
grep -h "^FAILED\|^ERROR" $OUT/tests_*.log | head -40
python tools/opinfo_sweep.py --report $OUT/sweep_cuda.json 2>&1 | tail -45
timeout $(( 560 - ($(date +%s) - T0) )) python tools/profile_model.py mobilenet_v3_large inference bf16 $OUT/prof > $OUT/prof_mnv3.log 2>&1
tail -n 6 $OUT/prof_mnv3.log
