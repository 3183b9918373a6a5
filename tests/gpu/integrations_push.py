"""The framework integrations (wsync.integrations) on a GPU: a transformers Qwen2 model on GPU 0
pushed through wsyncd (CUDA) into torch engines with SGLang semantics, by slime's updaters (the
seam fed with the model's HF-named parameters, in chunks as slime's gather hands them over) or by
verl's manager driving the `wsync` checkpoint-engine backend; every version bit-identical on every
engine rank.

    python3 tests/gpu/integrations_push.py --socket S --python-client client/python \
        --framework slime-distributed|slime-tensor|verl --engine URL --ranks N [--versions 3]
"""

import argparse
import asyncio
import os
import sys
import types

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from trainer_push import crc, get_json  # noqa: E402
from verl_stand_in import install_verl_stand_in  # noqa: E402


def chunks(state, chunk_bytes=64 << 20):
    """The state's (name, tensor) pairs in lists of about chunk_bytes, as slime's gather yields."""
    chunk, size = [], 0
    for name, t in state.items():
        chunk.append((name, t))
        size += t.numel() * t.element_size()
        if size >= chunk_bytes:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def check(url, state, version):
    expected = {k: crc(t) for k, t in state.items()}
    got = get_json(url + "/sim/checksums")
    ok = bool(got["ranks"]) and got["weight_version"] == version
    for rank, tensors in got["ranks"].items():
        bad = [k for k in expected if tensors.get(k) != expected[k]]
        print(f"  {url} rank {rank}: {len(expected) - len(bad)}/{len(expected)} tensors "
              f"bit-identical, weight_version {got['weight_version']}", flush=True)
        ok = ok and not bad
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--python-client", required=True)
    ap.add_argument("--framework", required=True,
                    choices=("slime-distributed", "slime-tensor", "verl"))
    ap.add_argument("--engine", required=True)
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--versions", type=int, default=3)
    args = ap.parse_args()
    sys.path.insert(0, args.python_client)

    torch.manual_seed(0)
    torch.cuda.set_device(0)
    config = Qwen2Config(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                         num_hidden_layers=4, num_attention_heads=16, num_key_value_heads=4,
                         tie_word_embeddings=False)
    model = Qwen2ForCausalLM(config).to("cuda:0", torch.bfloat16)
    target = "unix:" + args.socket
    state = {}
    ok = True

    if args.framework.startswith("slime"):
        import wsync.integrations.slime as wsync_slime
        base = (wsync_slime.UpdateWeightFromDistributed if args.framework == "slime-distributed"
                else wsync_slime.UpdateWeightFromTensor)

        class Fed(base):
            def hf_weight_chunks(self, convert=True):
                return chunks(state)

        slime_args = types.SimpleNamespace(
            rollout_num_gpus_per_engine=args.ranks, actor_num_nodes=1, actor_num_gpus_per_node=1,
            wsync_target=target, wsync_group=f"gpu-{args.framework}")
        updater = Fed(slime_args, [model], model.state_dict, model_name="qwen2",
                      quantization_config=None)
        updater.connect_rollout_engines([args.engine], None)
        for _ in range(args.versions):
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(torch.randn_like(p) * 0.01)
            state = model.state_dict()
            updater.update_weights()
            print(f"{args.framework} version {updater.weight_version}: "
                  f"{updater.pop_metrics()}", flush=True)
            ok = check(args.engine, state, str(updater.weight_version)) and ok
        updater.disconnect_rollout_engines()
    else:
        verl = install_verl_stand_in()
        import wsync.integrations.verl as wsync_verl
        backend = verl.CheckpointEngineRegistry.new("wsync", bucket_size=1 << 30, is_master=True,
                                                    target=target, group="gpu-verl")
        backend.set_engines([(args.engine, args.ranks)])
        for v in range(1, args.versions + 1):
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(torch.randn_like(p) * 0.01)
            state = model.state_dict()
            # verl's engines hand send_weights a generator of (name, full tensor).
            asyncio.run(backend.send_weights((k, t) for k, t in state.items()))
            print(f"verl version verl-{v}: {backend.metrics()}", flush=True)
            ok = check(args.engine, state, f"verl-{v}") and ok
        backend.close()
        assert wsync_verl.WsyncCheckpointEngine is verl.CheckpointEngineRegistry.get("wsync")
    print("INTEGRATION RESULT:", "PASS" if ok else "FAIL", flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
