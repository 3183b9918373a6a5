#!/usr/bin/env bash
# Runs every fuzz target of a WSYNC_FUZZ build (ASan + UBSan + libFuzzer) from its committed
# corpus, for a time (CI) or a number of executions (the documented run in docs/RELIABILITY.md),
# some at once, and prints one line per target: executions, executions per second, coverage
# (libFuzzer's cov: edges and ft: features), corpus size, and crashes. Fails if any target found
# a crash, a leak, a timeout or an invariant broken; the input is kept under OUT/artifacts/.
#
#   tests/fuzz/run_fuzzers.sh BUILD_DIR [--seconds N | --runs N] [--jobs J] [--out DIR] [--merge]
#                             [--only TARGET]
#
# New inputs go to a work corpus under OUT, never into the repository; --merge then adds to
# tests/fuzz/corpus/<target>/ only the inputs that bring new coverage (libFuzzer's -merge=1).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: run_fuzzers.sh BUILD_DIR [--seconds N | --runs N] [--jobs J] [--out DIR] [--merge]}
shift
limit=(-max_total_time=45)
jobs=$(nproc)
out=""
merge=0
only=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --seconds) limit=(-max_total_time="$2"); shift 2 ;;
    --runs) limit=(-runs="$2"); shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --merge) merge=1; shift ;;
    --only) only=$2; shift 2 ;;
    *) echo "run_fuzzers: unknown argument $1" >&2; exit 2 ;;
  esac
done
out=${out:-$build/fuzz-run}
mkdir -p "$out/artifacts"
targets=(store_protocol manifest http_reader config torch_pickle relay_subscribe relay_bucket
  delta_decode)
[[ -z $only ]] || targets=("$only")
# Frames and answers longer than the defaults' 4 KiB reach the limits the targets check.
declare -A max_len=([store_protocol]=8192 [manifest]=4096 [http_reader]=8192 [config]=4096
                  [torch_pickle]=4096 [relay_subscribe]=4096 [relay_bucket]=4096 [delta_decode]=4096)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
if [[ -x /usr/lib/llvm-14/bin/llvm-symbolizer ]]; then
  export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-/usr/lib/llvm-14/bin/llvm-symbolizer}
fi

run_one() {
  local t=$1 bin="$build/tests/fuzz/${1}_fuzzer" work="$out/corpus/$1" start=$SECONDS rc=0
  mkdir -p "$work"
  "$bin" "${limit[@]}" -max_len="${max_len[$t]}" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$out/artifacts/$t-" "$work" "$here/corpus/$t" \
    >"$out/$t.log" 2>&1 || rc=$?
  echo $((SECONDS - start)) >"$out/$t.seconds"
  return $rc
}

status=0
pids=()
names=()
for t in "${targets[@]}"; do
  [[ -x "$build/tests/fuzz/${t}_fuzzer" ]] || { echo "run_fuzzers: no ${t}_fuzzer in $build" >&2; exit 2; }
  run_one "$t" &
  pids+=($!)
  names+=("$t")
  if [[ ${#pids[@]} -ge $jobs ]]; then
    wait "${pids[0]}" || { echo "run_fuzzers: ${names[0]} FAILED (see $out/${names[0]}.log)"; status=1; }
    pids=("${pids[@]:1}")
    names=("${names[@]:1}")
  fi
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || { echo "run_fuzzers: ${names[$i]} FAILED (see $out/${names[$i]}.log)"; status=1; }
done

printf '%-15s %12s %9s %8s %8s %8s %8s %7s\n' target executions exec/s seconds cov ft corpus crashes
for t in "${targets[@]}"; do
  log="$out/$t.log"
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")
  crashes=$(find "$out/artifacts" -name "$t-*" -type f | wc -l)
  secs=$(cat "$out/$t.seconds" 2>/dev/null || echo '?')
  printf '%-15s %12s %9s %8s %8s %8s %8s %7s\n' "$t" "${execs:-?}" "${rate:-?}" "$secs" \
    "${cov:-?}" "${ft:-?}" "${corp:-?}" "$crashes"
  [[ $crashes -eq 0 ]] || status=1
done
if [[ $status -ne 0 ]]; then
  echo "run_fuzzers: FAILED; inputs that broke a target: $out/artifacts/"
  for t in "${targets[@]}"; do grep -E 'ERROR|invariant broken|runtime error|terminate' "$out/$t.log" | head -5 || true; done
fi
if [[ $merge -eq 1 && $status -eq 0 ]]; then
  for t in "${targets[@]}"; do
    "$build/tests/fuzz/${t}_fuzzer" -merge=1 -max_len="${max_len[$t]}" "$here/corpus/$t" \
      "$out/corpus/$t" >"$out/$t.merge.log" 2>&1
    echo "run_fuzzers: $t corpus now $(find "$here/corpus/$t" -type f | wc -l) inputs"
  done
fi
exit $status
