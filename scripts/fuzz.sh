#!/usr/bin/env bash
# Fuzzes the safetensors header checks (bench/fuzz_safetensors.cpp) with libFuzzer for a bounded time.
#   bash scripts/fuzz.sh [BUILD_DIR [SECONDS]]          defaults: build, 30
# Builds BUILD_DIR/fuzz/fuzz_safetensors with clang++ -fsanitize=fuzzer,address (again only when a source is newer),
# writes a seed corpus of small valid safetensors files and a dictionary of the format's keys, then fuzzes for SECONDS
# seconds. Exit status 0: no finding, and the fuzzer really ran; 1 otherwise, with a failing input saved as
# BUILD_DIR/fuzz/crash-* (replay: BUILD_DIR/fuzz/fuzz_safetensors FILE) and the log in BUILD_DIR/fuzz/last_run.log.
# ctest runs it as fuzz_safetensors when CMake finds clang++ with libFuzzer (option PPO_FUZZ).
# LibTorch: Debian's paths unless PPO_TORCH_INCLUDES (space-separated include dirs) and PPO_TORCH_LIBDIR are set.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
seconds=${2:-30}
out=$build/fuzz
bin=$out/fuzz_safetensors
clangxx=${PPO_CLANGXX:-clang++}
includes=${PPO_TORCH_INCLUDES:-/usr/include /usr/include/torch/csrc/api/include}
libdir=${PPO_TORCH_LIBDIR:-/usr/lib/x86_64-linux-gnu}
mkdir -p "$out/seeds" "$out/corpus"

sources=(bench/fuzz_safetensors.cpp model/safetensors.cpp model/safetensors.h common/error.h)
stale=0
[ -x "$bin" ] || stale=1
for s in "${sources[@]}"; do [ "$s" -nt "$bin" ] && stale=1; done
if [ "$stale" = 1 ]; then
  flags=(-I.)
  for dir in $includes; do [ "$dir" = /usr/include ] || flags+=(-I"$dir"); done  # a default dir stays last
  echo "fuzz: compiling $bin with $clangxx"
  "$clangxx" -std=c++17 -O1 -g -fsanitize=fuzzer,address "${flags[@]}" bench/fuzz_safetensors.cpp \
    model/safetensors.cpp -L"$libdir" -Wl,-rpath,"$libdir" -ltorch -ltorch_cpu -lc10 -o "$bin.tmp"
  mv "$bin.tmp" "$bin"
fi

# Seeds: valid files the format allows (empty header, metadata, every dtype, scalars, zero-size tensors, padding).
python3 - "$out/seeds" <<'EOF'
import json, struct, sys
sizes = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
def write(name, tensors, metadata=None, pad=0):
    header, data = {}, b""
    for key, dtype, shape in tensors:
        n = sizes[dtype]
        for d in shape: n *= d
        header[key] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + n]}
        data += bytes((i * 37 + 11) % 256 for i in range(n))
    if metadata is not None: header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode() + b" " * pad
    with open(f"{sys.argv[1]}/{name}", "wb") as f: f.write(struct.pack("<Q", len(text)) + text + data)
write("empty", [])
write("one_f32", [("w", "F32", [2, 3])], {"format": "pt"})
write("dtypes", [(f"t_{d.lower()}", d, [3]) for d in sizes])
write("scalar_and_empty", [("s", "I64", []), ("z", "F32", [0, 4]), ("b", "BOOL", [2, 2])])
write("padded", [("model.embed_tokens.weight", "BF16", [4, 2]), ("model.norm.weight", "BF16", [2])], {}, pad=5)
EOF
cat > "$out/safetensors.dict" <<'EOF'
"dtype"
"shape"
"data_offsets"
"__metadata__"
"format"
"F32"
"F16"
"BF16"
"F64"
"I64"
"U8"
"BOOL"
"F8_E4M3"
"18446744073709551615"
"9223372036854775808"
"[0,0]"
EOF

log=$out/last_run.log
set +e
"$bin" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=4096 -dict="$out/safetensors.dict" \
  -artifact_prefix="$out/" "$out/corpus" "$out/seeds" >"$log" 2>&1
status=$?
set -e
grep -E '^(INFO: Seed|INFO: Loaded|Done |==[0-9]+==|SUMMARY|artifact_prefix|Test unit written|Base64)' "$log" || true
[ "$status" -eq 0 ] || { echo "fuzz: the fuzzer reported a failure (exit $status); see $log"; exit 1; }
runs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1/p' "$log")
[ -n "$runs" ] && [ "$runs" -gt 0 ] || { echo "fuzz: no 'Done N runs' line in $log: the fuzzer did not run"; exit 1; }
echo "fuzz: $runs executions in $seconds s, no finding; corpus $(ls "$out/corpus" | wc -l) files"
