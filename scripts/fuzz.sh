#!/usr/bin/env bash
# Fuzzes the readers of outside input with libFuzzer, each for a bounded time:
#   bash scripts/fuzz.sh [BUILD_DIR [SECONDS [TARGET...]]]          defaults: build, 30, every target
# Targets, one program each (tests/fuzz/fuzz_<target>.cpp, beside its seeds and dictionary):
#   safetensors    the safetensors header checks (model/safetensors.cpp; links LibTorch)
#   config         the YAML config loader and key=value overrides, with the config_to_yaml round trip
#   jsonl          load_jsonl of every task (task records and veRL's layout), load_responses_jsonl, scoring,
#                  load_preference_pairs (ppo rm's pairs)
#   kk             K&K statements (evaluation, solving, text) and the Logic-RL answer parser kk_score
#   trainer_state  trainer_state.json, with the write/read round trip
#   bpe            the byte-level BPE tokenizer on the reference tokenizers under .ref/ (scripts/install-deps.sh)
#   tokenizer_json reading a tokenizer.json (and tokenizer_config's special tokens), then encoding with it
#   hf_config      a Hugging Face model folder's config.json (model/hf_config.cpp read_hf_config)
#   yaml_aliases   configs with YAML anchors and aliases (structure-aware: the input drives a YAML generator)
#   parquet        Parquet data files (Arrow's C++ reader of the pyarrow wheel), their records as samples of every
#                  task, and the write_parquet round trip; needs PPO_ARROW_INCLUDE_DIR and PPO_ARROW_LIBRARIES
#   lora_config    a PEFT adapter folder's adapter_config.json (model/lora.cpp load_peft_adapter; links LibTorch)
#   optim_index    the sharded optimizer state's index against a model's layout (workers/saved_optimizer.cpp; links
#                  LibTorch)
# tokenizer_json, hf_config, lora_config and optim_index take recipes for documents nested 200,000 deep besides plain text (tests/fuzz/fuzz_support.h).
# Builds BUILD_DIR/fuzz/fuzz_<target> with clang++ -fsanitize=fuzzer,address,undefined: the library sources are compiled
# once into BUILD_DIR/fuzz/obj/ (shared by the targets) and again only when they, a header they include or the flags
# change. Then fuzzes each target for SECONDS seconds (-max_total_time) from its seeds (tests/fuzz/<target>/; for
# config also configs/*.yaml; written here for safetensors) with its dictionary (tests/fuzz/<target>.dict), keeping
# what it learns in BUILD_DIR/fuzz/<target>/corpus. SECONDS 0: build only (ctest's fuzz_build).
# A finding is a crash, a sanitizer report, an exception other than ppo::UsageError, a failed check of the target, one
# input running over 10 s (-timeout) or a process over 2 GiB (-rss_limit_mb). Prints, per target,
# `fuzz: <target>: N executions in S s, no finding` and appends it to BUILD_DIR/fuzz/summary.txt. Exit status 0: every
# target ran without a finding; 1 otherwise, with the failing input saved as BUILD_DIR/fuzz/<target>/crash-* (timeout-*,
# oom-*, leak-*; replay: BUILD_DIR/fuzz/fuzz_<target> FILE) and the log in BUILD_DIR/fuzz/<target>/last_run.log.
# ctest runs fuzz_build and then fuzz_<target> for each target when CMake finds clang++ with libFuzzer (PPO_FUZZ).
# Environment: PPO_CLANGXX (default clang++); PPO_ARROW_INCLUDE_DIR and PPO_ARROW_LIBRARIES (space-separated full
# paths, linked with an RPATH to their folder) for parquet, as CMake found them (CMakeLists.txt); LibTorch for safetensors: Debian's paths unless PPO_TORCH_INCLUDES
# (space-separated include dirs) and PPO_TORCH_LIBDIR are set; PPO_REF_DIR (default .ref) for bpe; PPO_FUZZ_FLAGS:
# more libFuzzer flags for every target (e.g. -max_len=512); PPO_FUZZ_CXXFLAGS: more compiler flags (e.g.
# -fno-sanitize=float-cast-overflow to look past a known finding).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
seconds=${2:-30}
all_targets=(safetensors config jsonl kk trainer_state bpe tokenizer_json hf_config yaml_aliases parquet lora_config
             optim_index)
targets=("${@:3}")
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
out=$build/fuzz
clangxx=${PPO_CLANGXX:-clang++}
torch_includes=${PPO_TORCH_INCLUDES:-/usr/include /usr/include/torch/csrc/api/include}
torch_libdir=${PPO_TORCH_LIBDIR:-/usr/lib/x86_64-linux-gnu}

# The library sources each target links, besides tests/fuzz/fuzz_<target>.cpp and the readers every target shares
# (the bounded JSON reader, UTF-8); the model's, for the targets that build one or check its shape (with Batch, which
# model/packing.cpp reads).
shared_sources="common/json.cpp common/utf8.cpp"
model_sources="model/transformer.cpp model/model_shape.cpp model/attention.cpp model/kv_cache.cpp model/lora_linear.cpp model/autocast.cpp
  model/layer_shards.cpp model/packing.cpp model/masks.cpp model/moe.cpp common/batch.cpp"
declare -A sources=(
  [safetensors]="model/safetensors.cpp"
  [config]="common/config.cpp common/config_file.cpp"
  [yaml_aliases]="common/config.cpp common/config_file.cpp"
  [jsonl]="common/jsonl.cpp tasks/datasets.cpp tasks/task.cpp tasks/kk.cpp tasks/kk_score.cpp tasks/kk_task.cpp tasks/verl_record.cpp tasks/parquet.cpp tasks/preference_pairs.cpp"
  [kk]="common/jsonl.cpp tasks/datasets.cpp tasks/task.cpp tasks/kk.cpp tasks/kk_score.cpp tasks/kk_task.cpp tasks/verl_record.cpp tasks/parquet.cpp"
  [parquet]="common/jsonl.cpp tasks/datasets.cpp tasks/task.cpp tasks/kk.cpp tasks/kk_score.cpp tasks/kk_task.cpp tasks/verl_record.cpp tests/fuzz/parquet_enabled.cpp"
  [trainer_state]="records/trainer_state.cpp common/config.cpp common/config_file.cpp"
  [bpe]="text/bpe_tokenizer.cpp text/pre_tokenizer.cpp text/unicode.cpp"
  [tokenizer_json]="text/bpe_tokenizer.cpp text/pre_tokenizer.cpp text/unicode.cpp"
  [hf_config]="model/hf.cpp model/hf_config.cpp model/hf_experts.cpp model/safetensors.cpp $model_sources model/lora.cpp"
  [lora_config]="model/lora.cpp model/safetensors.cpp $model_sources"
  [optim_index]="workers/saved_optimizer.cpp model/safetensors.cpp"
)
# Sources compiled plainly, -O0 without instrumentation, in a quarter of the time: the file helpers every reader
# goes through (regular-file checks, reading); for the model's sources, the host-memory probe, which no fuzzed input
# reaches.
declare -A link_only=([safetensors]="common/files.cpp" [config]="common/files.cpp" [jsonl]="common/files.cpp"
                      [kk]="common/files.cpp" [trainer_state]="common/files.cpp common/manifest.cpp"
                      [bpe]="common/files.cpp"
                      [tokenizer_json]="common/files.cpp" [yaml_aliases]="common/files.cpp"
                      [hf_config]="common/files.cpp common/host_memory.cpp" [parquet]="common/files.cpp"
                      [lora_config]="common/files.cpp common/host_memory.cpp"
                      [optim_index]="common/files.cpp common/manifest.cpp")
# Longest input: a few times the largest seed (bigger inputs mostly slow the run down).
# Nesting past libFuzzer's lengths comes from the deep recipes of tokenizer_json and hf_config.
declare -A max_len=([safetensors]=4096 [config]=1024 [jsonl]=8192 [kk]=4096 [trainer_state]=1024 [bpe]=4096
                  [tokenizer_json]=8192 [hf_config]=4096 [yaml_aliases]=512
                  [parquet]=32768 [lora_config]=4096 [optim_index]=4096)
for t in "${targets[@]}"; do
  [ -n "${sources[$t]+set}" ] || { echo "fuzz: unknown target '$t'; valid: ${all_targets[*]}"; exit 2; }
done

# UBSan without the checks ASan mostly covers or that cost compile time for little (vptr, alignment, null,
# pointer-overflow, object-size); -gline-tables-only: stack traces with lines at two thirds of -g's compile time.
sanitize=-fsanitize=address,undefined
# shellcheck disable=SC2054  # the commas are clang's
base_flags=(-std=c++17 -O1 -gline-tables-only -I. "$sanitize,fuzzer-no-link"
            -fno-sanitize=vptr,alignment,null,pointer-overflow,object-size -fno-sanitize-recover=undefined)
# shellcheck disable=SC2206  # PPO_FUZZ_CXXFLAGS holds several flags
extra_flags=(${PPO_FUZZ_CXXFLAGS:-})
torch_flags=()
for dir in $torch_includes; do [ "$dir" = /usr/include ] || torch_flags+=(-I"$dir"); done  # a default dir stays last

# stale OUTPUT: whether OUTPUT is missing, or a file of its depfile (OUTPUT.d, written by -MMD) is newer.
stale() {
  [ -f "$1" ] && [ -f "$1.d" ] || return 0
  local dep
  # shellcheck disable=SC2013  # a depfile lists paths separated by spaces and backslash-newlines
  for dep in $(sed -e 's/^[^:]*://' -e 's/\\$//' "$1.d"); do [ "$dep" -nt "$1" ] && return 0; done
  return 1
}

# Through ccache where there is one, as the CMake builds (CMakeLists.txt): a fresh clone's fuzz_build takes the
# objects from the cache (base_dir makes the clone's absolute paths relative).
launcher=()
if command -v ccache >/dev/null; then
  launcher=(env "CCACHE_BASEDIR=$PWD" CCACHE_NOHASHDIR=1 ccache)
fi

# compile SOURCE FLAGS...: BUILD_DIR/fuzz/obj/<source path with / as _>.o, again only when stale or the flags changed.
compile() {
  local src=$1
  shift
  local name=${src%.cpp}
  local obj=$out/obj/${name//\//_}.o
  objects+=("$obj")
  if ! stale "$obj" && [ "$(cat "$obj.flags" 2>/dev/null)" = "$*" ]; then return 0; fi
  local start=$SECONDS
  "${launcher[@]}" "$clangxx" "$@" -MMD -MF "$obj.d" -c "$src" -o "$obj.tmp"
  mv "$obj.tmp" "$obj"
  echo "fuzz: compiled $src ($((SECONDS - start)) s)"
  echo "$*" >"$obj.flags"
}

# build TARGET: compiles what BUILD_DIR/fuzz/fuzz_TARGET needs and links it when an object is newer.
build_target() {
  local t=$1 bin=$out/fuzz_$1 src flags=("${base_flags[@]}") libs=()
  if [ "$t" = safetensors ]; then
    flags+=("${torch_flags[@]}")
    # shellcheck disable=SC2054  # the commas are the linker's
    libs=(-L"$torch_libdir" -Wl,-rpath,"$torch_libdir" -ltorch -ltorch_cpu -lc10)
  fi
  if [ "$t" = config ] || [ "$t" = yaml_aliases ]; then
    flags+=(-fsanitize-coverage-ignorelist=tests/fuzz/config.coverage_ignore)
    libs=(-lyaml-cpp)
  fi
  [ "$t" = trainer_state ] && libs=(-lyaml-cpp)
  if [ "$t" = hf_config ] || [ "$t" = lora_config ] || [ "$t" = optim_index ]; then
    flags+=("${torch_flags[@]}")
    # shellcheck disable=SC2054  # the commas are the linker's
    libs=(-L"$torch_libdir" -Wl,-rpath,"$torch_libdir" -ltorch -ltorch_cpu -lc10)
  fi
  local arrow_flags=()
  if [ "$t" = parquet ]; then
    [ -n "${PPO_ARROW_INCLUDE_DIR:-}" ] && [ -n "${PPO_ARROW_LIBRARIES:-}" ] ||
      { echo "fuzz: parquet needs PPO_ARROW_INCLUDE_DIR and PPO_ARROW_LIBRARIES (a build with PPO_WITH_PARQUET)"; exit 2; }
    arrow_flags=(-isystem "$PPO_ARROW_INCLUDE_DIR")
    local library
    # shellcheck disable=SC2086  # a space-separated list of paths
    for library in $PPO_ARROW_LIBRARIES; do libs+=("$library" -Wl,-rpath,"$(dirname "$library")"); done
  fi
  flags+=("${extra_flags[@]}")
  objects=()
  compile "tests/fuzz/fuzz_$t.cpp" "${flags[@]}" "-DPPO_SOURCE_DIR=\"$PWD\""
  for src in ${sources[$t]} $shared_sources; do
    if [ "$src" = tests/fuzz/parquet_enabled.cpp ]; then compile "$src" "${flags[@]}" "${arrow_flags[@]}"
    else compile "$src" "${flags[@]}"; fi
  done
  for src in ${link_only[$t]:-}; do compile "$src" -std=c++17 -O0 -I.; done
  local relink=0 obj
  [ -x "$bin" ] || relink=1
  for obj in "${objects[@]}"; do [ "$obj" -nt "$bin" ] && relink=1; done
  if [ "$relink" = 1 ]; then
    echo "fuzz: linking $bin"
    "$clangxx" "$sanitize,fuzzer" "${objects[@]}" "${libs[@]}" -o "$bin.tmp"
    mv "$bin.tmp" "$bin"
  fi
}

# seed TARGET: BUILD_DIR/fuzz/TARGET/seeds, written afresh.
seed() {
  local dir=$out/$1/seeds
  rm -rf "$dir"
  mkdir -p "$dir" "$out/$1/corpus"
  [ -d "tests/fuzz/$1" ] && cp tests/fuzz/"$1"/* "$dir"/
  [ "$1" = config ] && cp configs/*.yaml "$dir"/
  [ "$1" = safetensors ] || return 0
  # Valid files the format allows (empty header, metadata, every dtype, scalars, zero-size tensors, padding).
  python3 - "$dir" <<'EOF'
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
}

# fuzz TARGET: runs it for SECONDS, prints and records the outcome; returns 1 on a finding.
fuzz() {
  local t=$1 dir=$out/$1 log=$out/$1/last_run.log status runs took artifact
  local args=(-max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len="${max_len[$t]}"
              -print_final_stats=1 -artifact_prefix="$dir/")
  [ -f "tests/fuzz/$t.dict" ] && args+=(-dict="tests/fuzz/$t.dict")
  set +e
  # ASan's hard_rss_limit_mb ends a runaway allocation within 0.1 s of the limit (libFuzzer still saves the input, as
  # crash-*): libFuzzer's own -rss_limit_mb report first lists the live heap, which took over 15 minutes for the
  # millions of small blocks of an endless YAML::LoadAll.
  # shellcheck disable=SC2086  # PPO_FUZZ_FLAGS holds several flags
  PPO_REF_DIR=${PPO_REF_DIR:-$PWD/.ref} UBSAN_OPTIONS=print_stacktrace=1 \
    ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}hard_rss_limit_mb=2048 \
    "$out/fuzz_$t" "${args[@]}" ${PPO_FUZZ_FLAGS:-} "$dir/corpus" "$dir/seeds" >"$log" 2>&1
  status=$?
  set -e
  read -r runs took < <(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1 \2/p' "$log") || true
  local line
  if [ "$status" -eq 0 ] && [ -n "${runs:-}" ] && [ "$runs" -gt 0 ]; then
    line="fuzz: $t: $runs executions in $took s, no finding"
  elif [ "$status" -eq 0 ]; then
    line="fuzz: $t: no 'Done N runs' line in $log: the fuzzer did not run"
  else
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    grep -E '^(==[0-9]+==|SUMMARY|fuzz_|terminate called|  what\(\)|    #[0-9]+ |.*runtime error)' "$log" |
      head -40 || true
    line="fuzz: $t: FINDING (exit $status); input ${artifact:-none saved}; log $log"
  fi
  echo "$line"
  echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) $line" >>"$out/summary.txt"
  [[ "$line" == *", no finding" ]]
}

mkdir -p "$out/obj"
exec 9>"$out/obj/lock"  # one build at a time (ctest runs the fuzz tests in parallel)
flock 9
for t in "${targets[@]}"; do build_target "$t"; done
flock -u 9
for t in "${targets[@]}"; do seed "$t"; done
if [ "$seconds" = 0 ]; then
  echo "fuzz: built ${targets[*]} in $out"
  exit 0
fi
failed=()
for t in "${targets[@]}"; do fuzz "$t" || failed+=("$t"); done
[ ${#failed[@]} -eq 0 ] || { echo "fuzz: findings in: ${failed[*]}"; exit 1; }
