"""Drop-ins that put wsync under RL frameworks' own weight-update interfaces.

- `wsync.integrations.slime`: `UpdateWeightFromDistributed` and `UpdateWeightFromTensor` with
  slime's constructor and `update_weights()`, taking over after slime's gather and HF name
  conversion.
- `wsync.integrations.verl`: a `wsync` checkpoint-engine backend for verl's
  `CheckpointEngineRegistry`, and `attach(manager)`, which tells it the rollout servers.

Each module imports its framework only when it is used, so that `import wsync` never needs one.
docs/INTEGRATIONS.md names the commits whose interfaces these match.
"""

import os

DEFAULT_TARGET = "unix:/run/wsync/wsyncd.sock"


def target_from(value=None):
    """wsyncd's address: `value`, else $WSYNC_TARGET, else the packaged socket."""
    return value or os.environ.get("WSYNC_TARGET") or DEFAULT_TARGET


def current_device():
    """The trainer process's CUDA device (torch's current one), or 0 without torch or a GPU: the
    device of the wsyncd session an integration opens."""
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.current_device() if torch.cuda.is_available() else 0


def set_device(device):
    """Makes `device` the calling thread's CUDA device (torch keeps one per thread), where torch
    and a GPU are present."""
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available():
        torch.cuda.set_device(device)


def empty_cache():
    """Returns the trainer's cached, unused GPU memory to the driver (torch's empty_cache), for a
    colocated engine that wakes on the same GPU after an update."""
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def resolve(value):
    """Ray ObjectRefs' values (the frameworks' engines and workers are Ray actors), in a list
    too, or the value itself; Ray is imported only when one is met."""
    if isinstance(value, list):
        return [resolve(v) for v in value]
    if type(value).__name__ == "ObjectRef":
        import ray
        return ray.get(value)
    return value


def drain(tensors):
    """Iterates a framework's weight generator to its end without using it: its gather is
    collective, so a rank that does not push (or whose push failed) must still take part, or the
    other ranks wait in it."""
    for _ in tensors:
        pass


def engine_url(address):
    """An engine server's base URL from what a framework holds ("host:port" or a URL)."""
    address = str(address).rstrip("/")
    return address if "://" in address else f"http://{address}"


def group_spec(name, kind, engines, transport=None, options=None):
    """A group declaration (the keys of a config file's group): `engines` is a list of
    (url, ranks) or (url, ranks, gpus); `options` adds keys such as {"sglang": {...}}."""
    spec = {"name": name, "kind": kind, "engines": []}
    for engine in engines:
        entry = {"url": engine_url(engine[0]), "ranks": int(engine[1])}
        if len(engine) > 2 and engine[2]:
            entry["gpus"] = list(engine[2])
        spec["engines"].append(entry)
    if transport:
        spec["transport"] = transport
    spec.update(options or {})
    return spec


def result_metrics(result, prefix="wsync/"):
    """The figures of a push's result a framework's metrics take (floats by name)."""
    return {
        f"{prefix}seconds": float(result["seconds"]),
        f"{prefix}gib_per_second": float(result["gib_per_second"]),
        f"{prefix}buckets": float(result["buckets"]),
        f"{prefix}bytes": float(result["bytes"]),
    }
