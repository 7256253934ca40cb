"""ElasticSampler: a DistributedSampler that re-partitions what is left of an epoch after a reset."""

import math
import random
from typing import Any, Dict, Iterable, Iterator, List, Sized

import torch.utils.data

from ..basics import rank, size


class ElasticSampler(torch.utils.data.Sampler):
    """Partitions a dataset over the ranks, and after a reset only what is left of the epoch.

    Like ``DistributedSampler``, with a record of the samples processed this
    epoch: kept in a ``TorchState``, the record is combined over the ranks at
    each commit, and after a reset the samples not yet processed are split over
    the new number of ranks. Call ``record_batch`` (or ``record_indices``) after
    processing samples, and ``set_epoch`` at the end of each epoch (not the
    start: a reset in the middle of an epoch must not process its samples again).

    Args:
        dataset: the dataset (of constant length).
        shuffle: shuffle the indices, the same way on every rank.
        seed: the shuffle's seed, the same on every rank; each epoch adds its number.
    """

    def __init__(self, dataset: Sized, shuffle: bool = True, seed: int = 0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_indices: set = set()
        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices: List[int] = []
        self.num_samples = 0
        self.total_size = 0
        self.indices: List[int] = []
        self.reset()

    def set_epoch(self, epoch: int) -> None:
        """Starts epoch ``epoch``: forgets the processed samples and partitions the whole dataset."""
        self.epoch = epoch
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx: int, batch_size: int) -> None:
        """Records batch ``batch_idx`` (of ``batch_size``) of this rank's partition as processed."""
        self.record_indices(self.get_indices(batch_idx, batch_size))

    def record_indices(self, indices: Iterable[int]) -> None:
        """Records dataset indices as processed."""
        self.processed_indices.update(indices)

    def get_indices(self, batch_idx: int, batch_size: int) -> List[int]:
        """The dataset indices of batch ``batch_idx`` of this rank's current partition."""
        start = batch_idx * batch_size
        return self.indices[start : min(start + batch_size, len(self.indices))]

    def state_dict(self) -> Dict[str, Any]:
        return {"epoch": self.epoch, "processed_indices": self.processed_indices}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self.epoch = state_dict["epoch"]
        self.processed_indices = set(state_dict["processed_indices"])
        self.reset()

    def reset(self) -> None:
        """Partitions the samples of this epoch not yet processed over the current ranks."""
        self.num_replicas = size()
        self.rank = rank()
        remaining = [i for i in range(len(self.dataset)) if i not in self.processed_indices]
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(remaining)
        self.remaining_indices = remaining
        self.num_samples = math.ceil(len(remaining) / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas
        self.indices = self._partition()

    def _partition(self) -> List[int]:
        # Padded with the first indices to a multiple of the ranks, then every
        # num_replicas-th from this rank's: each rank gets num_samples.
        padded = (
            self.remaining_indices + self.remaining_indices[: self.total_size - len(self.remaining_indices)]
        )
        return padded[self.rank : self.total_size : self.num_replicas]

    def __iter__(self) -> Iterator[int]:
        self.indices = self._partition()
        return iter(self.indices)

    def __len__(self) -> int:
        return self.num_samples
