#!/usr/bin/env bash
# What CI runs (.ci/run): installs the Debian packages, builds, and runs the reliability suite
# (docs/RELIABILITY.md) in stages. Each stage has a budget in seconds on CI's machine (2 cores,
# no GPU) and is stopped when it runs past it; the budgets add up to 78 minutes, well under
# CI's 90. Every stage prints its time against its budget, and the run fails at the first stage
# that fails.
#
#   deps       deploy/install-deps.sh
#   format     every tracked C++ file as .clang-format lays it out (clang-format --dry-run)
#   build      CMake/Ninja, RelWithDebInfo (gcc)
#   tests      ctest: every test that needs no GPU (unit, service, integration; not bench, soak,
#              faults); tests labelled gpu skip themselves
#   faults     the fault matrix (ctest -L faults), and its table
#   soak       WSYNC_SOAK_UPDATES (200) updates through a real wsyncd (ctest -L soak)
#   package    the .deb (CPack), installed with apt into a clean Debian 12 root (mmdebstrap),
#              its unit verified and its wsyncd started there (deploy/package/check_deb.sh)
#   sanitize   a second build, clang with ASan + UBSan, with the libFuzzer targets (build-asan)
#   fuzz       each fuzz target for WSYNC_FUZZ_SECONDS (30) from its committed corpus
#   asan       ctest under ASan + UBSan: the tests stage's tests, the fault matrix and the fuzz
#              corpora (not bench, soak)
#   tsan       a third build, clang with ThreadSanitizer, of only the tests of the core, the
#              transports, the store and the services (build-tsan), and ctest over them
#
# WSYNC_STAGES="build tests" runs only those stages (in the order above).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# Absolute: ctest runs each test in its own directory, and the fault table is written from there.
export WSYNC_BUILD=$(realpath -m "${WSYNC_BUILD_DIR:-build}")
export WSYNC_SANITIZED_BUILD=$(realpath -m "${WSYNC_SANITIZED_BUILD_DIR:-build-asan}")
export WSYNC_TSAN_BUILD=$(realpath -m "${WSYNC_TSAN_BUILD_DIR:-build-tsan}")
export WSYNC_SOAK_UPDATES=${WSYNC_SOAK_UPDATES:-200}
export WSYNC_FUZZ_SECONDS=${WSYNC_FUZZ_SECONDS:-30}
export WSYNC_JOBS=$(nproc)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:detect_stack_use_after_return=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0}
export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-14/bin/llvm-symbolizer
# The first race stops the test; tests/sanitizers/tsan.supp says what is suppressed and why.
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/sanitizers/tsan.supp:external_symbolizer_path=/usr/lib/llvm-14/bin/llvm-symbolizer}

stage_deps() { deploy/install-deps.sh; }
stage_format() {
  # Listed by git, so build trees and fetched code are never judged.
  git ls-files -z '*.cc' '*.h' '*.hpp' '*.cu' '*.inc' | xargs -0 clang-format --dry-run -Werror
}
stage_build() {
  cmake -S . -B "$WSYNC_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWSYNC_CUDA=AUTO
  cmake --build "$WSYNC_BUILD" -- -j"$WSYNC_JOBS"
}
stage_tests() {
  ctest --test-dir "$WSYNC_BUILD" --output-on-failure --timeout 300 -j2 -LE 'bench|soak|faults'
}
stage_faults() {
  WSYNC_FAULT_TABLE="$WSYNC_BUILD/fault_matrix.md" \
    ctest --test-dir "$WSYNC_BUILD" --output-on-failure -L faults
  cat "$WSYNC_BUILD/fault_matrix.md"
}
stage_soak() { ctest --test-dir "$WSYNC_BUILD" --verbose -L soak; }
stage_package() { deploy/package/check_deb.sh "$WSYNC_BUILD"; }
stage_sanitize() {
  # -O1 with line tables: what the sanitizers need, at a fraction of a full debug build's time.
  # NDEBUG as in the release build: Boost.Beast 1.74 asserts more than its chunk parser needs
  # (boostorg/beast#2861), and wsync's own code has no assert().
  local sanitized_flags="-O1 -gline-tables-only -DNDEBUG"
  cmake -S . -B "$WSYNC_SANITIZED_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=None \
    -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
    -DCMAKE_C_FLAGS="$sanitized_flags" -DCMAKE_CXX_FLAGS="$sanitized_flags" \
    -DWSYNC_CUDA=OFF -DWSYNC_FUZZ=ON -DWSYNC_SANITIZE=address,undefined
  cmake --build "$WSYNC_SANITIZED_BUILD" -- -j"$WSYNC_JOBS"
}
stage_fuzz() {
  rm -rf "$WSYNC_SANITIZED_BUILD/fuzz-run"
  tests/fuzz/run_fuzzers.sh "$WSYNC_SANITIZED_BUILD" --seconds "$WSYNC_FUZZ_SECONDS" \
    --jobs "$WSYNC_JOBS"
}
stage_asan() {
  ctest --test-dir "$WSYNC_SANITIZED_BUILD" --output-on-failure --timeout 600 -j2 -LE 'bench|soak'
}
stage_tsan() {
  # The tests of the code that runs threads: the core (update runs, fan-out, quorum checks,
  # recovery), the transports (bucket transfer, update channels, the host collective and its
  # guarded copies), torch's TCPStore server, the services (gRPC handlers, stream writers,
  # listeners, health) with the client, and the daemon's units. Tests of parsers, payloads and
  # engine adapters alone, and the process and python tests (integration), are not built here.
  local tests=(core_test core_quorum_test core_recovery_test core_membership_test core_parts_tests
    transport_tests common_tests rendezvous_tests daemon_tests metrics_tests
    update_service_test auth_test call_limits_test group_teardown_test pipeline_test pull_test
    ipc_pull_test bucket_rules_test)
  # As the sanitize stage's build: -O1 with line tables, NDEBUG.
  local tsan_flags="-O1 -gline-tables-only -DNDEBUG"
  cmake -S . -B "$WSYNC_TSAN_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=None \
    -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
    -DCMAKE_C_FLAGS="$tsan_flags" -DCMAKE_CXX_FLAGS="$tsan_flags" \
    -DWSYNC_CUDA=OFF -DWSYNC_SANITIZE=thread
  cmake --build "$WSYNC_TSAN_BUILD" --target "${tests[@]}" -- -j"$WSYNC_JOBS"
  # ctest lists every test of the tree (a target not built here as one TARGET_NOT_BUILT test):
  # run, by number, those whose executable is in the list.
  local numbers
  numbers=$(ctest --test-dir "$WSYNC_TSAN_BUILD" --show-only=json-v1 | python3 -c '
import json, os, sys
wanted = set(sys.argv[1:])
tests = json.load(sys.stdin)["tests"]
print(",".join(str(i + 1) for i, t in enumerate(tests)
               if os.path.basename(t.get("command", [""])[0]) in wanted))' "${tests[@]}")
  [[ -n $numbers ]]
  ctest --test-dir "$WSYNC_TSAN_BUILD" --output-on-failure --timeout 600 -j2 -I "0,0,0,$numbers"
}
export -f stage_deps stage_format stage_build stage_tests stage_faults stage_soak stage_package \
  stage_sanitize stage_fuzz \
  stage_asan stage_tsan

# name and budget (seconds), in order. Measured on a clean clone: docs/RELIABILITY.md.
stages=(deps:300 format:60 build:1100 tests:270 faults:210 soak:30 package:120 sanitize:1080
  fuzz:180 asan:480 tsan:900)
wanted=" ${WSYNC_STAGES:-deps format build tests faults soak package sanitize fuzz asan tsan} "
summary=()
total_budget=0
run_start=$(date +%s)
for entry in "${stages[@]}"; do
  name=${entry%%:*}
  budget=${entry##*:}
  [[ $wanted == *" $name "* ]] || continue
  total_budget=$((total_budget + budget))
  echo "=== stage $name (budget $budget s) ==="
  start=$(date +%s)
  rc=0
  timeout --foreground --kill-after=10 "$budget" bash -c "set -euo pipefail; stage_$name" || rc=$?
  took=$(( $(date +%s) - start ))
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then
    line="stage $name: ran past its budget of $budget s: FAILED"
  elif [[ $rc -ne 0 ]]; then
    line="stage $name: $took s of $budget s budget: FAILED (exit $rc)"
  else
    line="stage $name: $took s of $budget s budget"
  fi
  echo "=== $line ==="
  summary+=("$line")
  if [[ $rc -ne 0 ]]; then
    printf '%s\n' "${summary[@]}"
    exit 1
  fi
done
echo "=== summary ==="
printf '%s\n' "${summary[@]}"
echo "total: $(( $(date +%s) - run_start )) s of $total_budget s budget"
