"""verl's checkpoint-engine registry, stood in for where verl is not installed (CI, the GPU
machine): `verl.checkpoint_engine.base`'s CheckpointEngineRegistry and CheckpointEngine as verl
b178a3cd defines them (a name maps to a class; `new` builds it with verl's arguments)."""

import abc
import sys
import types


def install_verl_stand_in():
    """Installs the stand-in as the module `verl.checkpoint_engine.base` and returns it."""
    base = types.ModuleType("verl.checkpoint_engine.base")

    class CheckpointEngineRegistry:
        _registry = {}

        def register(backend):
            def wrapper(cls):
                CheckpointEngineRegistry._registry[backend] = cls
                return cls
            return wrapper

        @classmethod
        def get(cls, backend):
            return cls._registry[backend]

        @classmethod
        def new(cls, backend, *args, **kwargs):
            if backend not in cls._registry:
                raise ValueError(f"Checkpoint engine {backend} not registered")
            return cls._registry[backend](*args, **kwargs)

    class CheckpointEngine(abc.ABC):
        pass

    base.CheckpointEngineRegistry = CheckpointEngineRegistry
    base.CheckpointEngine = CheckpointEngine
    for name in ("verl", "verl.checkpoint_engine"):
        sys.modules[name] = types.ModuleType(name)
    sys.modules["verl.checkpoint_engine.base"] = base
    return base
