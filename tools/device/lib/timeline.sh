#!/bin/bash
# Builds tools/device/cuda/kernel_timeline.cu (a CUPTI injection library: Nsight Systems is not on the device
# machines) and runs a command under it; tools/device/py/timeline.py then tells where the GPU idled
# between syncs. Run from the repo root on the device machine:
#   TIMELINE=$OUT/t.csv bash tools/device/run.sh timeline ./bench_train --dtypes bf16 ...
#   python3 tools/device/py/timeline.py $OUT/t.csv
set -eu
CUDA=${CUDA_HOME:-/usr/local/cuda}
CUPTI=$(dirname "$(dirname "$(find "$CUDA"/ /usr/local -name cupti.h -path '*include*' 2>/dev/null | head -1)")")
HDR="$CUPTI/include"
newest() { grep -rhoE "CUpti_Activity$1[0-9]+\b" "$HDR" | sort -V | tail -1; }
LIB=/tmp/libtimeline.so
if [ ! -f $LIB ]; then
  nvcc -O2 -shared -Xcompiler -fPIC -I"$HDR" -DKREC="$(newest Kernel)" -DMREC="$(newest Memcpy)" \
    -DSREC="$(newest Memset)" "$(dirname "$0")/../cuda/kernel_timeline.cu" -o $LIB \
    -L"$CUPTI/lib64" -L"$CUDA/lib64" -lcupti -Xlinker -rpath -Xlinker "$CUPTI/lib64"
fi
export LD_LIBRARY_PATH="$CUPTI/lib64:${LD_LIBRARY_PATH:-}"
CUDA_INJECTION64_PATH=$LIB HYPATIA_TIMELINE=${TIMELINE:-timeline.csv} "$@"
