"""wsync as a verl checkpoint-engine backend (volcengine/verl's `CheckpointEngineRegistry`).

verl moves weights with a named backend (`actor_rollout_ref.rollout.checkpoint_engine.backend`):
the trainer's workers call `send_weights(generator)` and each rollout worker feeds
`receive_weights()` to its server adapter. With the `wsync` backend, trainer rank 0 pushes the
generator's tensors through wsyncd, which loads them into the rollout servers through their own
routes (pause, buckets with the version, resume); the other trainer ranks iterate the generator
(its gather is collective); `receive_weights()` yields nothing, since the weights are already in
the server, and verl's manager ends the step only once both sides returned, so after wsyncd
committed (or the push raised). There is nothing to rendezvous: `prepare`, `build_topology`,
`init_process_group` and `finalize` do nothing.

verl builds backends inside its Ray workers, so the module must be imported in every process:
set `VERL_USE_EXTERNAL_MODULES=wsync.integrations.verl` in the job's environment (Ray's
`runtime_env` env_vars), which verl's own `__init__` imports. Then, where the trainer builds
verl's `CheckpointEngineManager`:

    import wsync.integrations.verl as wsync_verl     # registers "wsync" with verl
    wsync_verl.attach(checkpoint_manager)            # tells the trainer the rollout servers

and in the config `actor_rollout_ref.rollout.checkpoint_engine.backend=wsync`, with the
backend's settings under `engine_kwargs.wsync` (all optional): `target` (wsyncd's address, else
$WSYNC_TARGET, else unix:/run/wsync/wsyncd.sock), `group` ("verl"), `kind` ("sglang"),
`options` (more group keys), `version_prefix` ("verl-"; each update is `<prefix><n>`),
`start_version` (0; the first update is `<prefix><start_version + 1>`, so that a trainer resumed
from a checkpoint continues its numbering).

Served: SGLang rollout servers without pipeline parallelism, in bf16/fp16/fp32. Refused before
anything is sent, with what was read: another rollout kind (verl's vLLM servers take weights
through verl's own receive path), a quantized rollout (verl's fp8 rollout quantizes in that path)
and pipeline-parallel replicas (SGLang numbers its weight-update ranks by TP rank only).
"""

import asyncio

import wsync
from . import (current_device, drain, engine_url, group_spec, resolve, result_metrics, set_device,
               target_from)


class WsyncCheckpointEngine:
    """verl's CheckpointEngine interface (prepare, build_topology, init_process_group, finalize,
    async send_weights, async receive_weights), built by verl with `bucket_size`, `is_master`
    (trainer rank 0) and the backend's `engine_kwargs`."""

    def __init__(self, bucket_size, is_master=False, target=None, group="verl", kind="sglang",
                 options=None, version_prefix="verl-", start_version=0):
        if kind != "sglang":
            raise ValueError(
                f"wsync's verl backend serves SGLang rollout servers; engine_kwargs.wsync.kind is "
                f"{kind!r}. verl's vLLM servers load weights through verl's own receive path, "
                "which wsync does not replace yet: keep verl's nccl or naive backend for them")
        self.bucket_size = bucket_size
        self.is_master = is_master
        self.target = target_from(target)
        self.group = group
        self.kind = kind
        self.options = dict(options or {})
        self.version_prefix = version_prefix
        self.updates = int(start_version)
        self.engines = []
        self.last_result = None
        self._declared = None
        self._client = None

    # verl's rendezvous steps: wsyncd holds the groups, so there is nothing to set up.
    def prepare(self):
        return {}

    @classmethod
    def build_topology(cls, trainer_world_size, rollout_world_size, metadata):
        return {}, {}

    def init_process_group(self, **kwargs):
        pass

    def finalize(self):
        pass

    def set_engines(self, engines):
        """The rollout servers, [(address, ranks)], from `attach`; declared to wsyncd before the
        next push (again only when they changed)."""
        self.engines = [(engine_url(address), int(ranks)) for address, ranks in engines]

    def _declare(self):
        if not self.engines:
            raise wsync.WsyncError(
                3, "the wsync checkpoint engine knows no rollout servers: call "
                   "wsync.integrations.verl.attach(manager) where the trainer builds verl's "
                   "CheckpointEngineManager")
        if self._client is None:
            self._client = wsync.Client(self.target, device=current_device(),
                                        name="verl trainer rank 0")
        spec = group_spec(self.group, self.kind, self.engines, options=self.options)
        if spec != self._declared:
            self._client.declare_group(spec)
            self._declared = spec

    async def send_weights(self, weights):
        """Pushes the generator's (name, tensor) pairs as one version (trainer rank 0); the other
        ranks iterate it for its collective gather. Either runs in a thread on this process's
        device, so that the worker's event loop goes on while the update runs."""
        self.updates += 1
        await asyncio.to_thread(self._send, weights, current_device())

    def _send(self, weights, device):
        set_device(device)
        if not self.is_master:
            drain(weights)
            return
        try:
            self._declare()
            self.last_result = self._client.push(
                weights, version=f"{self.version_prefix}{self.updates}", group=self.group,
                progress=False)
        except BaseException:
            drain(weights)  # the other ranks wait in the gather until this one ends it
            raise

    async def receive_weights(self):
        """Nothing to receive: wsyncd delivered into the server itself."""
        return
        yield  # an async generator, as verl's server adapters iterate one

    def metrics(self):
        return result_metrics(self.last_result) if self.last_result else {}

    def close(self):
        if self._client is not None:
            self._client.close()
            self._client = None
            self._declared = None


def check_replica(replica):
    """Refuses a rollout replica the backend cannot serve, naming what its config says."""
    config = getattr(replica, "config", None)
    name = getattr(config, "name", None)
    where = f"rollout replica at {replica.server_address}"
    if name not in (None, "sglang"):
        raise ValueError(
            f"{where}: rollout.name is {name!r}; wsync's verl backend serves SGLang servers (verl's "
            "vLLM servers load weights through verl's own receive path): keep verl's nccl or "
            "naive backend for them")
    quantization = getattr(config, "quantization", None)
    if quantization:
        raise ValueError(
            f"{where}: rollout.quantization is {quantization!r}; verl quantizes in its own receive "
            "path, which wsync does not run: turn rollout quantization off or keep verl's "
            "backend")
    pp = int(getattr(config, "pipeline_model_parallel_size", 1) or 1)
    if pp > 1:
        raise ValueError(
            f"{where}: rollout.pipeline_model_parallel_size is {pp}; SGLang numbers its "
            "weight-update ranks by TP rank only, so pipeline stages would share ranks: use "
            "pipeline_model_parallel_size 1")


def attach(manager):
    """Has verl's CheckpointEngineManager tell the trainer's wsync backends the rollout servers
    (each replica's `server_address` and `world_size`) before each update, as replicas come and
    go, after checking that each is one the backend serves. Returns the manager."""
    build = manager.build_process_group

    def build_process_group(rollout):
        for r in manager.replicas:
            check_replica(r)
        engines = [(r.server_address, r.world_size) for r in manager.replicas]
        n = manager.trainer.world_size
        resolve(manager.trainer.execute_checkpoint_engine(["set_engines"] * n, [engines] * n))
        return build(rollout)

    manager.build_process_group = build_process_group
    return manager


def register(registry=None):
    """Registers the backend as "wsync" with verl's registry (done on import where verl is
    installed); returns the class."""
    if registry is None:
        from verl.checkpoint_engine.base import CheckpointEngine, CheckpointEngineRegistry
        registry = CheckpointEngineRegistry
        if not issubclass(WsyncCheckpointEngine, CheckpointEngine):
            CheckpointEngine.register(WsyncCheckpointEngine)  # an ABC: a virtual subclass
    return registry.register("wsync")(WsyncCheckpointEngine)


try:
    register()
except ImportError:
    pass  # verl is not installed: register(registry) by hand
