"""The slime and verl integrations (client/python/wsync/integrations) end to end in host mode:
real wsyncd and SGLang simulator processes, driven through each framework's own interface as
docs/INTEGRATIONS.md records it. Megatron is not here, so the slime tests feed slime's seam (HF
names and full tensors) directly; verl is not here, so its registry and its manager's calls are
stood in for as verl's source makes them.

Usage: framework_integrations_test.py WSYNCD WSYNCCTL LIBWSYNC_CLIENT PYTHON_PACKAGE_DIR SGLANG_SIM
"""

import asyncio
import importlib.util
import inspect
import json
import os
import subprocess
import sys
import threading
import time
import types
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from process_support import (HostWsyncdCase, client_test_arguments, crc, free_port,  # noqa: E402
                             host_gpu, sglang_engine, sim_state, wait_port)

_, _, _, PACKAGE_DIR, SIM = client_test_arguments()

import numpy as np  # noqa: E402
import wsync  # noqa: E402
import wsync.integrations.slime as wsync_slime  # noqa: E402


from verl_stand_in import install_verl_stand_in  # noqa: E402

VERL = install_verl_stand_in()
import wsync.integrations.verl as wsync_verl  # noqa: E402  (registers "wsync" on import)


def model(seed, layers=3):
    """HF-named tensors as slime's convert_to_hf hands them over: float32 and bfloat16 bits."""
    rng = np.random.default_rng(seed)
    tensors = [("model.embed_tokens.weight", rng.integers(0, 2**16, (400, 700), np.uint16),
                "bfloat16")]
    for i in range(layers):
        tensors.append((f"model.layers.{i}.mlp.down_proj.weight",
                        rng.standard_normal((300, 512)).astype(np.float32)))
        tensors.append((f"model.layers.{i}.input_layernorm.weight",
                        rng.standard_normal(512).astype(np.float32)))
    return tensors


def chunks_of(tensors, per_chunk=3):
    return [tensors[i:i + per_chunk] for i in range(0, len(tensors), per_chunk)]


class FedSeam:
    """slime's gather and conversion stood in for: each update takes the next model's chunks."""

    def set_models(self, models):
        self.models = list(models)
        self.gathered = 0

    def hf_weight_chunks(self, convert=True):
        for chunk in chunks_of(self.models.pop(0)):
            self.gathered += 1
            yield chunk


class FedDistributed(FedSeam, wsync_slime.UpdateWeightFromDistributed):
    pass


class FedTensor(FedSeam, wsync_slime.UpdateWeightFromTensor):
    pass


class EngineActor:
    """What slime's SGLangEngine offers the updaters: its server's URL."""

    def __init__(self, port):
        self.port = port

    def get_url(self):
        return f"http://127.0.0.1:{self.port}"


class IntegrationCase(HostWsyncdCase):
    def start_sim(self, *flags):
        port = free_port()
        self.spawn(f"sim{port}", [*sglang_engine(SIM), "--port", str(port), *flags])
        wait_port(port)
        return port

    def groups(self):
        out = self.ctl("--json", "groups")
        self.assertEqual(out.returncode, 0, out.stderr)
        return [g["spec"]["name"] for g in json.loads(out.stdout).get("groups", [])]

    def assert_holds(self, port, tensors, version, ranks):
        state = sim_state(port)
        self.assertEqual(state["weight_version"], version)
        self.assertEqual(sorted(state["ranks"]), [str(r) for r in ranks])
        for rank, held in state["ranks"].items():
            for item in tensors:
                self.assertEqual(held.get(item[0]), crc(item[1]), f"rank {rank} {item[0]}")


class SlimeInterfaceTest(unittest.TestCase):
    """The drop-ins keep slime's signatures (slime 624b824a, update_weight/*.py)."""

    def test_constructor_and_methods_have_slimes_shape(self):
        for cls in (wsync_slime.UpdateWeightFromDistributed, wsync_slime.UpdateWeightFromTensor):
            init = inspect.signature(cls.__init__).parameters
            self.assertEqual(list(init), ["self", "args", "model", "weights_getter", "model_name",
                                          "quantization_config"])
            for name in ("model_name", "quantization_config"):
                self.assertEqual(init[name].kind, inspect.Parameter.KEYWORD_ONLY)
            connect = inspect.signature(cls.connect_rollout_engines).parameters
            self.assertEqual(list(connect), ["self", "rollout_engines", "rollout_engine_lock",
                                             "engine_gpu_counts", "engine_gpu_offsets",
                                             "engine_parallel_configs"])
            self.assertEqual(list(inspect.signature(cls.update_weights).parameters), ["self"])
            self.assertTrue(callable(cls.pop_metrics))
        distributed = wsync_slime.UpdateWeightFromDistributed
        self.assertTrue(callable(distributed.disconnect_rollout_engines))

    def test_without_slime_the_gather_names_what_is_missing(self):
        if importlib.util.find_spec("slime") is not None:
            self.skipTest("slime is installed here")
        updater = wsync_slime.UpdateWeightFromDistributed(
            types.SimpleNamespace(), [], dict, model_name="qwen2", quantization_config=None)
        with self.assertRaises(ImportError) as e:
            list(updater.hf_weight_chunks())
        self.assertIn("HfWeightIteratorDirect", str(e.exception))

    def test_only_a_pushing_rank_converts_where_slimes_iterator_can_skip_it(self):
        asked = []

        class Newer:  # slime's iterator with should_convert_chunk
            def get_hf_weight_chunks(self, weights, progress_desc="Update weights",
                                     should_convert_chunk=None):
                for index in range(2):
                    asked.append(should_convert_chunk(index))
                    yield [("w", weights)] if should_convert_chunk(index) else []

        class Older:
            def get_hf_weight_chunks(self, weights):
                yield [("w", weights)]

        updater = wsync_slime.UpdateWeightFromDistributed(
            types.SimpleNamespace(), [], lambda: 7, model_name="qwen2", quantization_config=None)
        updater._iterator = Newer()
        self.assertEqual(list(updater._named_tensors(convert=False)), [])
        self.assertEqual(list(updater._named_tensors(convert=True)), [("w", 7), ("w", 7)])
        self.assertEqual(asked, [False, False, True, True])
        updater._iterator = Older()
        self.assertEqual(list(updater._named_tensors(convert=False)), [("w", 7)])

    def test_a_compressed_tensors_rollout_is_refused_at_construction(self):
        # slime's int4/fp4 rollout needs SGLang's post-processing request after the load; its
        # HF config's quantization_config is a dict, or an object where a framework parsed it.
        for config in ({"quant_method": "compressed-tensors"},
                       types.SimpleNamespace(quant_method="compressed-tensors")):
            for cls in (wsync_slime.UpdateWeightFromDistributed,
                        wsync_slime.UpdateWeightFromTensor):
                with self.assertRaises(ValueError) as e:
                    cls(types.SimpleNamespace(), [], dict, model_name="qwen2",
                        quantization_config=config)
                self.assertIn("quant_method 'compressed-tensors'", str(e.exception))
                self.assertIn("post_process_weights", str(e.exception))
        # fp8 weights travel as converted (float8 tensors and their scales).
        wsync_slime.UpdateWeightFromDistributed(
            types.SimpleNamespace(), [], dict, model_name="qwen2",
            quantization_config={"quant_method": "fp8"})


class SlimeDistributedTest(IntegrationCase):
    def test_versions_land_bit_exact_on_every_rank_and_disconnect_ends_the_group(self):
        port = self.start_sim("--tp", "2")
        args = types.SimpleNamespace(rollout_num_gpus_per_engine=2,
                                     wsync_target="unix:" + self.sock,
                                     wsync_group="slime-policy")
        updater = FedDistributed(args, [], dict, model_name="qwen2", quantization_config=None)
        models = [model(1), model(2)]
        updater.set_models(models)
        updater.connect_rollout_engines([EngineActor(port)], rollout_engine_lock=None)
        self.assertIn("slime-policy", self.groups())
        for version, tensors in ((1, models[0]), (2, models[1])):
            updater.update_weights()
            self.assertEqual(updater.weight_version, version)
            self.assert_holds(port, tensors, str(version), ranks=[1, 2])
            metrics = updater.pop_metrics()
            self.assertGreater(metrics["perf/wsync_buckets"], 1, "a 1 MiB slot: several buckets")
            self.assertEqual(metrics["perf/wsync_bytes"],
                             sum(np.asarray(t[1]).nbytes for t in tensors))
            self.assertEqual(updater.pop_metrics(), {})
        self.assertEqual(updater.gathered, 2 * len(chunks_of(models[0])))
        updater.disconnect_rollout_engines()
        self.assertNotIn("slime-policy", self.groups())
        self.assertEqual(sim_state(port)["group"], "", "the engine dropped its update group")

    def test_a_start_version_set_from_outside_is_continued(self):
        # slime's actor sets weight_version before the first update (a resumed run).
        port = self.start_sim("--tp", "2")
        args = types.SimpleNamespace(rollout_num_gpus_per_engine=2,
                                     wsync_target="unix:" + self.sock)
        updater = FedDistributed(args, [], dict, model_name="qwen2", quantization_config=None)
        updater.set_models([model(3)])
        updater.connect_rollout_engines([EngineActor(port)], None, engine_gpu_counts=[2])
        updater.weight_version = 41
        updater.update_weights()
        self.assert_holds(port, model(3), "42", ranks=[1, 2])
        updater.disconnect_rollout_engines()


    def test_a_dead_engine_is_left_out_until_slime_connects_it_again(self):
        # slime's fault tolerance: a dead engine's place holds None until it is back, and then
        # connect_rollout_engines is called again (num_new_engines > 0).
        a, b = self.start_sim("--tp", "2"), self.start_sim("--tp", "1")
        args = types.SimpleNamespace(rollout_num_gpus_per_engine=2,
                                     wsync_target="unix:" + self.sock)
        updater = FedDistributed(args, [], dict, model_name="qwen2", quantization_config=None)
        updater.set_models([model(9), model(10)])
        updater.connect_rollout_engines([EngineActor(a), None], None, engine_gpu_counts=[2, 1])
        updater.update_weights()
        self.assert_holds(a, model(9), "1", ranks=[1, 2])
        self.assertEqual(sim_state(b)["updates_received"], 0)
        updater.connect_rollout_engines([EngineActor(a), EngineActor(b)], None,
                                        engine_gpu_counts=[2, 1])
        updater.update_weights()
        self.assert_holds(a, model(10), "2", ranks=[1, 2])
        self.assert_holds(b, model(10), "2", ranks=[3])
        updater.disconnect_rollout_engines()


class SlimeColocatedTest(IntegrationCase):
    def setUp(self):
        super().setUp()
        # Host mode's GPU is a stand-in; torch would read the real one's UUID.
        self.real_uuid = wsync_slime.local_gpu_uuid
        wsync_slime.local_gpu_uuid = host_gpu

    def tearDown(self):
        wsync_slime.local_gpu_uuid = self.real_uuid
        super().tearDown()

    def test_the_colocated_engine_gets_each_version_bit_exact(self):
        port = self.start_sim("--gpus", host_gpu(0))
        args = types.SimpleNamespace(rollout_num_gpus_per_engine=1, actor_num_nodes=1,
                                     actor_num_gpus_per_node=1, wsync_target="unix:" + self.sock)
        updater = FedTensor(args, [], dict, model_name="qwen2", quantization_config=None)
        models = [model(4), model(5)]
        updater.set_models(models)
        updater.connect_rollout_engines([EngineActor(port)], None)
        for version, tensors in ((1, models[0]), (2, models[1])):
            updater.update_weights()
            self.assert_holds(port, tensors, str(version), ranks=[1])
        self.assertIn("perf/wsync_seconds", updater.pop_metrics())
        updater.disconnect_rollout_engines()
        self.assertNotIn("slime", self.groups())

    def test_engines_beyond_the_trainers_gpus_are_refused_before_anything_is_declared(self):
        port = self.start_sim("--gpus", host_gpu(0))
        args = types.SimpleNamespace(rollout_num_gpus_per_engine=1, actor_num_nodes=1,
                                     actor_num_gpus_per_node=1, wsync_target="unix:" + self.sock)
        updater = FedTensor(args, [], dict, model_name="qwen2", quantization_config=None)
        with self.assertRaises(ValueError) as e:
            updater.connect_rollout_engines([EngineActor(port), EngineActor(port)], None)
        self.assertIn("engines [1] lie beyond its 1 GPUs", str(e.exception))
        self.assertIn("UpdateWeightFromDistributed", str(e.exception))
        self.assertEqual(self.groups(), [])


class Replica:
    """What verl's RolloutReplica offers: its server's address, world size and rollout config."""

    def __init__(self, port, world_size, **config):
        self.server_address = f"127.0.0.1:{port}"
        self.world_size = world_size
        self.config = types.SimpleNamespace(**{"name": "sglang", "quantization": None,
                                               "pipeline_model_parallel_size": 1, **config})


class TrainerGroup:
    """verl's trainer RayWorkerGroup as the manager uses it: execute_checkpoint_engine dispatches
    one call per worker (DP_COMPUTE: each argument a list, one item per worker)."""

    def __init__(self, engines):
        self.engines = engines
        self.world_size = len(engines)

    def execute_checkpoint_engine(self, method, *args):
        return [getattr(e, m)(*(a[i] for a in args)) for i, (e, m) in
                enumerate(zip(self.engines, method))]


class Manager:
    """verl's CheckpointEngineManager, its update_weights as b178a3cd runs it for a non-naive
    backend (abort and resume left out: no real server here)."""

    def __init__(self, trainer, replicas):
        self.backend_cls = VERL.CheckpointEngineRegistry.get("wsync")
        self.trainer = trainer
        self.replicas = replicas
        self.rollout = [VERL.CheckpointEngineRegistry.new("wsync", bucket_size=1 << 20)]

    def build_process_group(self, rollout):
        metadata = (self.trainer.execute_checkpoint_engine(["prepare"] * self.trainer.world_size)
                    + [r.prepare() for r in rollout])
        trainer_kwargs, rollout_kwargs = self.backend_cls.build_topology(
            self.trainer.world_size, len(rollout), metadata)
        for e in self.trainer.engines:
            e.init_process_group(**trainer_kwargs)
        for r in rollout:
            r.init_process_group(**rollout_kwargs)

    def update_weights(self, generators):
        self.build_process_group(self.rollout)
        received = []

        async def receive(engine):
            async for item in engine.receive_weights():
                received.append(item)

        async def step():
            await asyncio.gather(*[e.send_weights(g) for e, g in zip(self.trainer.engines,
                                                                    generators)],
                                 *[receive(r) for r in self.rollout])
        asyncio.run(step())
        for e in self.trainer.engines + self.rollout:
            e.finalize()
        return received


class VerlBackendTest(IntegrationCase):
    def backends(self):
        kwargs = {"target": "unix:" + self.sock, "group": "verl-rollout"}
        return [VERL.CheckpointEngineRegistry.new("wsync", bucket_size=1 << 20, is_master=(i == 0),
                                                  **kwargs) for i in range(2)]

    def test_registered_under_its_name_and_each_update_lands_through_wsyncd(self):
        self.assertIs(VERL.CheckpointEngineRegistry.get("wsync"), wsync_verl.WsyncCheckpointEngine)
        first, second = self.start_sim("--tp", "2"), self.start_sim("--tp", "1")
        trainer = TrainerGroup(self.backends())
        manager = wsync_verl.attach(Manager(trainer, [Replica(first, 2)]))
        drained = []

        def generator(tensors, seen):
            for item in tensors:
                seen.append(item[0])
                yield item

        tensors = model(6)
        received = manager.update_weights([generator(tensors, []), generator(tensors, drained)])
        self.assertEqual(received, [], "the rollout side receives nothing: wsyncd delivered")
        self.assertEqual(len(drained), len(tensors), "the other trainer rank ran its generator")
        self.assert_holds(first, tensors, "verl-1", ranks=[1, 2])
        self.assertIn("verl-rollout", self.groups())
        # A replica added (elastic scale-up): the next update declares both and both hold it.
        manager.replicas.append(Replica(second, 1))
        tensors = model(7)
        manager.update_weights([generator(tensors, []), generator(tensors, [])])
        self.assert_holds(first, tensors, "verl-2", ranks=[1, 2])
        self.assert_holds(second, tensors, "verl-2", ranks=[3])  # group rank 3
        self.assertEqual(trainer.engines[0].metrics()["wsync/bytes"],
                         sum(np.asarray(t[1]).nbytes for t in tensors))
        trainer.engines[0].close()
        self.assertNotIn("verl-rollout", self.groups(), "the group ends with its session")

    def test_without_attach_the_push_is_refused_naming_the_hook(self):
        port = self.start_sim("--tp", "1")
        trainer = TrainerGroup(self.backends())
        manager = Manager(trainer, [Replica(port, 1)])
        seen = []

        def gathered():
            for item in model(8):
                seen.append(item[0])
                yield item

        with self.assertRaises(wsync.WsyncError) as e:
            manager.update_weights([gathered(), iter(model(8))])
        self.assertIn("wsync.integrations.verl.attach(manager)", e.exception.message)
        self.assertEqual(len(seen), len(model(8)),
                         "a failed push still runs the collective generator to its end")
        self.assertEqual(sim_state(port)["updates_received"], 0)

    def test_replicas_it_cannot_serve_are_refused_before_any_request(self):
        port = self.start_sim("--tp", "1")
        cases = [({"name": "vllm"}, "rollout.name is 'vllm'"),
                 ({"quantization": "fp8"}, "rollout.quantization is 'fp8'"),
                 ({"pipeline_model_parallel_size": 2}, "pipeline_model_parallel_size is 2")]
        for config, expected in cases:
            trainer = TrainerGroup(self.backends())
            manager = wsync_verl.attach(Manager(trainer, [Replica(port, 1, **config)]))
            with self.assertRaises(ValueError) as e:
                manager.update_weights([iter(model(9)), iter(model(9))])
            self.assertIn(expected, str(e.exception))
            self.assertIn(f"127.0.0.1:{port}", str(e.exception))
        self.assertEqual(sim_state(port)["updates_received"], 0)
        self.assertNotIn("verl-rollout", self.groups())
        with self.assertRaises(ValueError) as e:
            VERL.CheckpointEngineRegistry.new("wsync", bucket_size=1 << 20, kind="vllm")
        self.assertIn("kind is 'vllm'", str(e.exception))

    def test_a_start_version_continues_the_numbering_of_a_resumed_trainer(self):
        port = self.start_sim("--tp", "1")
        kwargs = {"target": "unix:" + self.sock, "group": "verl-rollout", "start_version": 41}
        trainer = TrainerGroup([VERL.CheckpointEngineRegistry.new(
            "wsync", bucket_size=1 << 20, is_master=(i == 0), **kwargs) for i in range(2)])
        manager = wsync_verl.attach(Manager(trainer, [Replica(port, 1)]))
        manager.update_weights([iter(model(10)), iter(model(10))])
        self.assert_holds(port, model(10), "verl-42", ranks=[1])
        trainer.engines[0].close()

    def test_the_push_runs_off_the_workers_event_loop(self):
        # verl's workers are async actors: a push that held the loop would stall every other
        # coroutine of the worker for the whole update.
        port = self.start_sim("--tp", "1")
        backend = self.backends()[0]
        backend.set_engines([(f"127.0.0.1:{port}", 1)])
        pushing = threading.Event()

        def slow():
            for item in model(11):
                pushing.set()
                time.sleep(0.05)
                yield item

        async def step():
            ticks = 0

            async def ticker():
                nonlocal ticks
                while not pushing.is_set():
                    await asyncio.sleep(0.001)
                while not done.is_set():
                    ticks += 1
                    await asyncio.sleep(0.01)

            done = asyncio.Event()
            tick = asyncio.create_task(ticker())
            await backend.send_weights(slow())
            done.set()
            await tick
            return ticks

        self.assertGreater(asyncio.run(step()), 5, "the loop ran while the push did")
        self.assert_holds(port, model(11), "verl-1", ranks=[1])
        backend.close()


class VerlFreshProcessTest(unittest.TestCase):
    def test_verls_external_modules_variable_registers_the_backend_in_a_new_process(self):
        # verl's __init__ imports each module named in VERL_USE_EXTERNAL_MODULES in every process
        # (its Ray workers included); nothing else of wsync is imported there first.
        here = os.path.dirname(os.path.abspath(__file__))
        code = ("import importlib, os, sys\n"
                f"sys.path.insert(0, {here!r})\n"
                "from verl_stand_in import install_verl_stand_in\n"
                "base = install_verl_stand_in()\n"
                "for m in os.environ['VERL_USE_EXTERNAL_MODULES'].split(','):\n"
                "    importlib.import_module(m)\n"
                "engine = base.CheckpointEngineRegistry.new('wsync', bucket_size=1 << 20,\n"
                "                                           is_master=False)\n"
                "print(type(engine).__module__, engine.group, engine.updates)\n")
        env = dict(os.environ, VERL_USE_EXTERNAL_MODULES="wsync.integrations.verl",
                   PYTHONPATH=PACKAGE_DIR)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.split(), ["wsync.integrations.verl", "verl", "0"])


if __name__ == "__main__":
    unittest.main()
