"""TorchState: elastic training's state of a PyTorch training process."""

import copy
from typing import Any, Dict, List, Optional, Tuple, Type

import torch

from accord.elastic import ObjectState

from ..basics import rank
from ..functions import allgather_object, broadcast_object
from ..functions_state import broadcast_optimizer_state, broadcast_parameters
from .sampler import ElasticSampler


class StateHandler:
    """Saves, restores, syncs and resets one object of a TorchState."""

    def __init__(self, value: Any):
        self.value = value

    def save(self) -> None:
        raise NotImplementedError()

    def restore(self) -> None:
        raise NotImplementedError()

    def sync(self) -> None:
        raise NotImplementedError()

    def reset(self) -> None:
        """Adapts the object to a new set of ranks (nothing by default)."""

    def spill_payload(self) -> Any:
        """The saved state, for an elastic spill file; later saves must not change the object returned."""
        raise NotImplementedError(f"{type(self).__name__} cannot be written to an elastic spill file")

    def load_payload(self, payload: Any) -> None:
        """Makes ``payload`` (from ``spill_payload``) the saved state; ``restore()`` follows."""
        raise NotImplementedError(f"{type(self).__name__} cannot load an elastic spill file")

    def set_value(self, value: Any) -> None:
        self.value = value
        self.save()


class _StateDictHandler(StateHandler):
    """An object with state_dict/load_state_dict: a deep copy of its state_dict is the saved state."""

    def __init__(self, value: Any):
        super().__init__(value)
        self._saved = copy.deepcopy(value.state_dict())

    def save(self) -> None:
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self) -> None:
        self.value.load_state_dict(self._saved)

    def spill_payload(self) -> Any:
        return self._saved  # each save makes a new copy

    def load_payload(self, payload: Any) -> None:
        self._saved = payload


class ModelStateHandler(_StateDictHandler):
    def sync(self) -> None:
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class OptimizerStateHandler(_StateDictHandler):
    def sync(self) -> None:
        broadcast_optimizer_state(self.value, root_rank=0)


class LRSchedulerStateHandler(_StateDictHandler):
    def sync(self) -> None:
        self.value.load_state_dict(broadcast_object(self.value.state_dict()))


class SamplerStateHandler(_StateDictHandler):
    """The sampler's record is combined over the ranks at each save and reset.

    Each rank records the samples it processed; the union is what the job
    processed. A save keeps the union, so any rank can restore it; a reset
    (every rank together) gives each rank the union before re-partitioning,
    so that every rank splits the same remaining samples, whether or not a
    sync follows.
    """

    def _combined(self) -> dict:
        state = copy.deepcopy(self.value.state_dict())
        state["processed_indices"] = set().union(*allgather_object(self.value.processed_indices))
        return state

    def save(self) -> None:
        self._saved = self._combined()

    def sync(self) -> None:
        self.value.load_state_dict(broadcast_object(self.value.state_dict()))

    def reset(self) -> None:
        self.value.load_state_dict(self._combined())


def _scheduler_type() -> type:
    scheduler = getattr(torch.optim.lr_scheduler, "LRScheduler", None)  # torch 2.x
    return scheduler or torch.optim.lr_scheduler._LRScheduler


_handler_registry: List[Tuple[type, Type[StateHandler]]] = [
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (_scheduler_type(), LRSchedulerStateHandler),
    (ElasticSampler, SamplerStateHandler),
]


def get_handler_registry() -> List[Tuple[type, Type[StateHandler]]]:
    """The (type, handler class) pairs TorchState looks its objects up in, first match wins."""
    return _handler_registry


def set_handler_registry(registry: List[Tuple[type, Type[StateHandler]]]) -> None:
    global _handler_registry
    _handler_registry = registry


def _handler_for(value: Any) -> Optional[StateHandler]:
    for kind, handler in _handler_registry:
        if isinstance(value, kind):
            return handler(value)
    return None


class TorchState(ObjectState):
    """The state of a PyTorch training process, for ``accord.torch.elastic.run``.

    Models, optimizers, learning-rate schedulers and ``ElasticSampler``s (as
    ``model``, ``optimizer`` or any keyword) are saved with deep copies of their
    ``state_dict()`` and synchronized with ``broadcast_parameters``,
    ``broadcast_optimizer_state`` and ``broadcast_object``; any other keyword is
    a plain picklable object (``ObjectState``). Each is an attribute:
    ``state.model``, ``state.epoch``; assigning a new model or optimizer saves
    it at once. In accordrun's elastic mode a commit also writes the saved
    state_dicts and objects to a spill file with ``torch.save``, from which
    the next generation starts (tensors load to the CPU, then into the
    objects wherever they live).

    Args:
        model: a ``torch.nn.Module``, or None.
        optimizer: a ``torch.optim.Optimizer``, or None.
        kwargs: more objects to keep.
    """

    def __init__(
        self,
        model: Optional[torch.nn.Module] = None,
        optimizer: Optional[torch.optim.Optimizer] = None,
        **kwargs: Any,
    ):
        kwargs.update(model=model, optimizer=optimizer)
        handlers: Dict[str, StateHandler] = {}
        plain: Dict[str, Any] = {}
        for name, value in kwargs.items():
            handler = _handler_for(value)
            if handler is None:
                plain[name] = value
            else:
                handlers[name] = handler
        self._handlers = handlers
        for name, handler in handlers.items():
            setattr(self, name, handler.value)
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **plain)

    def _each_handler(self, action: str) -> None:
        for handler in self._handlers.values():
            getattr(handler, action)()

    def save(self) -> None:
        self._each_handler("save")
        super().save()

    def restore(self) -> None:
        self._each_handler("restore")
        super().restore()

    def sync(self) -> None:
        self._each_handler("sync")
        super().sync()

    def reset(self) -> None:
        self._each_handler("reset")
        super().reset()

    # Elastic spill files: the handlers' saved state_dicts beside the plain
    # objects, written by torch.save, which streams the tensors to the file.

    def _spill_payload(self, detached: bool) -> Any:
        payload = super()._spill_payload(detached)
        payload["handlers"] = {name: handler.spill_payload() for name, handler in self._handlers.items()}
        return payload

    def _load_payload(self, payload: Any) -> None:
        super()._load_payload(payload)
        for name, saved in payload.get("handlers", {}).items():
            if name in self._handlers:
                self._handlers[name].load_payload(saved)

    def _spill_save(self, record: Any, path: str) -> None:
        torch.save(record, path)

    def _spill_load(self, path: str) -> Any:
        # Tensors come to the CPU; load_state_dict moves them to where the
        # objects live. weights_only=False: the objects are arbitrary.
        return torch.load(path, map_location="cpu", weights_only=False)

    def __setattr__(self, name: str, value: Any) -> None:
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers and name in self.__dict__:
            handlers[name].set_value(value)
        super().__setattr__(name, value)
