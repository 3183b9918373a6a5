"""wsync under slime's weight updaters (THUDM/slime; not miles, whose updaters differ).

slime picks its updater in `slime/backends/megatron_utils/actor.py`: `UpdateWeightFromTensor` when
the rollout engines are colocated with the trainer (`args.colocate`), else
`UpdateWeightFromDistributed`. The two classes here have the same constructor,
`connect_rollout_engines`, `update_weights()`, `pop_metrics()` and `weight_version`, so a one-line
change of import puts wsync in their place:

    from wsync.integrations.slime import UpdateWeightFromDistributed, UpdateWeightFromTensor

They take over after slime's own gather and HF name conversion (`hf_weight_chunks`: lists of HF
names and full tensors, slime's `HfWeightIteratorDirect`), and push those through wsyncd instead of
slime's HTTP calls and broadcasts: wsyncd pauses the engines, loads the buckets with the version
and resumes them. The engines are declared to wsyncd by trainer rank 0 when slime connects them (a
group owned by that rank's session, gone when it closes). Settings, read from slime's `args` where
set: `wsync_target` (else $WSYNC_TARGET, else unix:/run/wsync/wsyncd.sock), `wsync_group` (default
"slime"), `wsync_engine_kind` ("sglang"), `wsync_group_options` (more group keys, e.g.
{"sglang": {"load_format": "flattened_bucket"}}).

Refused at construction: a `quantization_config` whose `quant_method` is "compressed-tensors"
(slime's int4/fp4 rollout), whose weights need SGLang's post-processing request after the load,
which wsync does not send.
"""

import contextlib
import inspect

import wsync
from . import (current_device, drain, empty_cache, engine_url, group_spec, resolve,
               result_metrics, target_from)


def _dist():
    """torch.distributed where the trainer initialized it, else None (one process)."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    return dist if dist.is_available() and dist.is_initialized() else None


def _no_grad():
    try:
        import torch
    except ImportError:
        return contextlib.nullcontext()
    return torch.no_grad()


def local_gpu_uuid(device):
    """The UUID of this process's GPU as wsyncd names GPUs ("GPU-..."), for colocated groups."""
    import torch
    return f"GPU-{torch.cuda.get_device_properties(device).uuid}"


def engine_address(engine):
    """An engine's server URL: a slime `SGLangEngine` actor (`get_url`), an object with
    `get_url()`, or the URL itself."""
    get_url = getattr(engine, "get_url", None)
    if get_url is None:
        if not isinstance(engine, str):
            raise TypeError(f"a rollout engine must have get_url() (slime's SGLangEngine) or be "
                            f"its URL; got {type(engine).__name__}")
        return engine_url(engine)
    remote = getattr(get_url, "remote", None)
    return engine_url(resolve(remote() if remote else get_url()))


def quant_method(quantization_config):
    """The `quant_method` of an HF quantization config (a dict or an object), or None."""
    if quantization_config is None:
        return None
    if isinstance(quantization_config, dict):
        return quantization_config.get("quant_method")
    return getattr(quantization_config, "quant_method", None)


class _WsyncUpdater:
    """What both updaters share: slime's constructor, the seam, the push and the metrics."""

    transport = None

    def __init__(self, args, model, weights_getter, *, model_name, quantization_config):
        method = quant_method(quantization_config)
        if method == "compressed-tensors":
            raise ValueError(
                "wsync's slime updaters push the HF tensors as slime converts them; "
                "quantization_config has quant_method 'compressed-tensors' (slime's int4/fp4 "
                "rollout), whose weights SGLang must post-process after the load "
                "(post_process_weights), which wsync does not send yet: keep slime's own updater "
                "for a compressed-tensors rollout")
        self.args = args
        self.model = model
        self.weights_getter = weights_getter
        self.model_name = model_name
        self.quantization_config = quantization_config
        dist = _dist()
        self.rank = dist.get_rank() if dist else 0
        self.weight_version = 0
        self.update_weight_metrics = {}
        self.rollout_engines = []
        self.group = getattr(args, "wsync_group", None) or "slime"
        self.target = target_from(getattr(args, "wsync_target", None))
        self.engine_kind = getattr(args, "wsync_engine_kind", None) or "sglang"
        self.group_options = getattr(args, "wsync_group_options", None) or {}
        self._client = None
        self._iterator = None

    def hf_weight_chunks(self, convert=True):
        """slime's gather (PP and EP broadcasts, TP all-gather) and HF conversion: one list of
        (HF name, full tensor) per bucket of `args.update_weight_buffer_size`, on every trainer
        rank. Collective: every rank must iterate it to its end. `convert` False: a rank that
        does not push skips the conversion where slime's iterator takes `should_convert_chunk`
        (newer slime); older ones convert on every rank."""
        if self._iterator is None:
            try:
                from slime.backends.megatron_utils.update_weight.hf_weight_iterator_direct import (
                    HfWeightIteratorDirect)
            except ImportError as e:
                raise ImportError(
                    "wsync.integrations.slime gathers weights with slime's HfWeightIteratorDirect "
                    f"(slime.backends.megatron_utils.update_weight), which did not import: {e}"
                ) from e
            self._iterator = HfWeightIteratorDirect(
                args=self.args, model=self.model, model_name=self.model_name,
                quantization_config=self.quantization_config)
        chunks = self._iterator.get_hf_weight_chunks
        kwargs = {}
        if "should_convert_chunk" in inspect.signature(chunks).parameters:
            kwargs["should_convert_chunk"] = lambda _index: convert
        return chunks(self.weights_getter(), **kwargs)

    def _named_tensors(self, convert=True):
        for chunk in self.hf_weight_chunks(convert):
            yield from chunk or ()

    def _open_client(self):
        if self._client is None:
            self._client = wsync.Client(self.target, device=current_device(),
                                        name=f"slime rank {self.rank}")
        return self._client

    def _declare(self, engines):
        spec = group_spec(self.group, self.engine_kind, engines, self.transport,
                          self.group_options)
        self._open_client().declare_group(spec)

    def _update(self, pushes, **push_options):
        """One version: this rank pushes the chunks when `pushes`, else only iterates them (the
        gather is collective)."""
        self.weight_version += 1
        with _no_grad():
            tensors = self._named_tensors(convert=pushes)
            if not pushes:
                drain(tensors)
                return
            try:
                result = self._client.push(tensors, version=str(self.weight_version),
                                           group=self.group, progress=False, **push_options)
            except BaseException:
                drain(tensors)  # the other ranks wait in the gather until this one ends it
                raise
        self.update_weight_metrics.update(result_metrics(result, "perf/wsync_"))

    def pop_metrics(self):
        out, self.update_weight_metrics = self.update_weight_metrics, {}
        return out

    def disconnect_rollout_engines(self):
        """Ends the group rank 0 declared (its engines drop their weight-update group) and this
        rank's session."""
        if self._client is not None:
            if self.rank == 0:
                with contextlib.suppress(wsync.WsyncError):
                    self._client.forget_group(self.group)
            self._client.close()
            self._client = None


class UpdateWeightFromDistributed(_WsyncUpdater):
    """Disaggregated engines: wsyncd is rank 0 of each engine's weight-update group (NCCL), fed by
    trainer rank 0; the other ranks take part in the gather only."""

    def connect_rollout_engines(self, rollout_engines, rollout_engine_lock,
                                engine_gpu_counts=None, engine_gpu_offsets=None,
                                engine_parallel_configs=None):
        self.rollout_engines = list(rollout_engines)
        counts = engine_gpu_counts or [self.args.rollout_num_gpus_per_engine] * len(
            self.rollout_engines)
        if self.rank == 0:
            # slime's fault tolerance leaves None where an engine died and is not back yet; the
            # next connect (num_new_engines > 0) brings it in.
            self._declare([(engine_address(e), n) for e, n in zip(self.rollout_engines, counts)
                           if e is not None])

    def update_weights(self):
        self._update(pushes=self.rank == 0)


class UpdateWeightFromTensor(_WsyncUpdater):
    """Colocated engines: wsyncd hands each engine rank CUDA-IPC handles of its own GPU's slots.
    Every trainer rank on an engine's GPU pushes the same version from its GPU (`tp_rank`: its
    place among the group's GPUs); rank 0 declares the group with every rank's GPU."""

    transport = "ipc"

    def connect_rollout_engines(self, rollout_engines, rollout_engine_lock,
                                engine_gpu_counts=None, engine_gpu_offsets=None,
                                engine_parallel_configs=None):
        self.rollout_engines = list(rollout_engines)
        counts = list(engine_gpu_counts or [self.args.rollout_num_gpus_per_engine] * len(
            self.rollout_engines))
        offsets = list(engine_gpu_offsets or [sum(counts[:i]) for i in range(len(counts))])
        trainer_gpus = getattr(self.args, "actor_num_nodes", 1) * getattr(
            self.args, "actor_num_gpus_per_node", sum(counts))
        beyond = [i for i, (o, n) in enumerate(zip(offsets, counts)) if o + n > trainer_gpus]
        if beyond:
            raise ValueError(
                f"wsync's UpdateWeightFromTensor serves engines on the trainer's GPUs; engines "
                f"{beyond} lie beyond its {trainer_gpus} GPUs: use UpdateWeightFromDistributed "
                "for disaggregated engines")
        dist = _dist()
        uuid = local_gpu_uuid(current_device())
        uuids = [uuid]
        if dist:
            uuids = [None] * dist.get_world_size()
            dist.all_gather_object(uuids, uuid)
        # This rank's place among the group's GPUs (the engines' ranks in order), or None.
        feeds = [r for e, o, n in zip(self.rollout_engines, offsets, counts) if e is not None
                 for r in range(o, o + n)]
        self._feed = feeds.index(self.rank) if self.rank in feeds else None
        if self.rank == 0:
            self._declare([(engine_address(e), n, uuids[o:o + n])
                           for e, n, o in zip(self.rollout_engines, counts, offsets)
                           if e is not None])
        if dist:
            dist.barrier()  # the group exists before any rank pushes to it
        if self._feed is not None:
            self._open_client()

    def update_weights(self):
        if self._feed is None:
            self._update(pushes=False)
        else:
            self._update(pushes=True, tp_rank=self._feed)
        # The gathered full tensors are gone once the update ended (and wsyncd closed what it
        # mapped of them); their cached memory goes back to the driver for the engine that
        # shares this GPU.
        empty_cache()
