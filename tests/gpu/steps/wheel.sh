#!/usr/bin/env bash
# The Python client as a trainer's image gets it: its wheel installed offline into a fresh venv
# that sees the machine's torch and grpcio (--system-site-packages), with no wsync library on the
# loader's path; imported beside both, it pushes a Qwen2 model through wsyncd (CUDA) into a torch
# engine, 3 versions bit-identical. The wheel: build/dist (`ninja python_wheel`), carried with the
# bundle, or $WSYNC_BUILD_DIR/dist.
source tests/gpu/lib/common.sh
source tests/gpu/lib/policy.sh
gpu_step wheel "the client's wheel in a fresh venv beside torch and grpcio, pushing through wsyncd"
need_gpus 2
wheel=$(ls build/dist/wsync-*.whl "${WSYNC_BUILD_DIR:-/nonexistent}"/dist/wsync-*.whl \
  2>/dev/null | head -1)
if [[ -z $wheel ]]; then
  echo "FAIL: no wheel in build/dist: run \`ninja -C build python_wheel\` and carry build/dist"
  fail=1
  end_step
fi
venv=$LOGS/venv
# Where the system's python has no ensurepip (Debian and Ubuntu without python3-venv), the venv
# is made without pip and the system's pip installs into it (pip >= 22.3: --python).
pip=("$venv/bin/pip")
if ! python3 -m venv --system-site-packages "$venv" >"$LOGS/venv.log" 2>&1; then
  rm -rf "$venv"
  python3 -m venv --system-site-packages --without-pip "$venv" >>"$LOGS/venv.log" 2>&1 || fail=1
  pip=(python3 -m pip --python "$venv/bin/python")
fi
# --no-index: the machine has no internet, as many clusters' nodes do not.
"${pip[@]}" install --no-index "$wheel" >>"$LOGS/venv.log" 2>&1 ||
  { echo "FAILED: pip install $wheel"; fail=1; }
tail -2 "$LOGS/venv.log"
# The machine's python3 may itself be a venv (torch's), whose packages --system-site-packages does
# not reach: a .pth file appends that interpreter's site folders after the new venv's own, as a
# trainer's image that layers an environment does.
python3 -c 'import site; print("\n".join(site.getsitepackages()))' >"$(
  "$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/torch_env.pth"
# The client must load from the wheel alone: neither the bundle's libraries nor its client.
(
  unset WSYNC_CLIENT_LIB
  export LD_LIBRARY_PATH=
  cd "$LOGS" || exit 1
  "$venv/bin/python" - <<'PY' 2>&1 | tee "$LOGS/import.log"
import os, subprocess, sys
import torch, grpc, wsync
lib = os.path.join(os.path.dirname(wsync.__file__), "libwsync_client.so")
print("wsync from", wsync.__file__)
print("torch", torch.__version__, "grpcio", grpc.__version__)
ldd = subprocess.run(["ldd", lib], capture_output=True, text=True).stdout
missing = [line.strip() for line in ldd.splitlines() if "not found" in line]
print("libwsync_client.so loads", len(ldd.splitlines()), "libraries;", len(missing), "missing")
loaded = wsync.load_library()
print("loaded:", loaded._name)
sys.exit(1 if missing or not loaded._name.startswith(os.path.dirname(wsync.__file__)) else 0)
PY
) || { echo "FAILED: the wheel's client does not load on its own"; fail=1; }
start_policy
# An empty folder as --python-client: `import wsync` finds the venv's installed package.
mkdir -p "$LOGS/no-source"
(
  unset WSYNC_CLIENT_LIB
  export LD_LIBRARY_PATH=
  timeout 150 "$venv/bin/python" tests/gpu/trainer_push.py --socket "$policy_sock" \
    --python-client "$LOGS/no-source" --engines "$policy_engines" --versions 3 2>&1 |
    tee -a "$LOGS/trainer.log"
  exit "${PIPESTATUS[0]}"
) || { echo "FAILED: the wheel's client did not push 3 versions bit-identically"; fail=1; }
grep -q "wsync from $venv" "$LOGS/import.log" ||
  { echo "FAILED: wsync not imported from the venv"; fail=1; }
ctl $policy_sock "$LOGS/trainer.log" updates
alive $policy_wsyncd wsyncd
end_step
