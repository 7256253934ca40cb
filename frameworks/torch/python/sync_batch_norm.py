"""Batch normalization whose batch statistics span every rank's batch."""

from typing import Optional

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from accord import global_process_set
from accord.ops import Sum

from . import mpi_ops as _ops

__all__ = ["SyncBatchNorm"]


def _set_size(process_set) -> int:
    size = process_set.size()
    if size is None:
        raise ValueError(
            f"SyncBatchNorm: {process_set!r} is not registered; pass it to "
            "init(process_sets=...) or add_process_set() first"
        )
    return int(size)


def _allreduce_sum(tensor: torch.Tensor, process_set) -> torch.Tensor:
    _ops.synchronize(_ops.allreduce_async_(tensor, op=Sum, process_set=process_set))
    return tensor


class _SyncBatchNormFunction(torch.autograd.Function):
    """Normalizes with the mean and variance of the batch of every rank together.

    Forward sums, per channel, every rank's element count, sum and sum of
    squares (the latter two formed in float64 from each rank's mean and
    centred second moment, so that large means do not cancel). Backward sums
    the gradient statistics ``sum(dy)`` and ``sum(dy * (x - mean))`` the
    same way, so that each rank's input gradient is that of the full batch.
    Weight and bias gradients stay local to each rank (their reduction is
    the optimizer's job).
    """

    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum, process_set):
        channels = input.shape[1]
        dims = [0] + list(range(2, input.dim()))
        local_count = input.numel() // channels if channels else 0
        if local_count > 0:
            var, mean = torch.var_mean(input, dim=dims, unbiased=False)
            mean64 = mean.double()
            stats = torch.cat(
                [
                    torch.tensor([float(local_count)], dtype=torch.float64, device=input.device),
                    mean64 * local_count,
                    var.double() * local_count + mean64 * mean64 * local_count,
                ]
            )
        else:
            stats = torch.zeros(1 + 2 * channels, dtype=torch.float64, device=input.device)
        _allreduce_sum(stats, process_set)
        count = stats[0].item()
        if count <= 1:
            raise ValueError(
                "SyncBatchNorm: expected more than 1 value per channel when training "
                f"(all ranks together have {int(count)}), got input of size "
                f"{list(input.shape)}"
            )
        global_mean = stats[1 : 1 + channels] / count
        global_var = (stats[1 + channels :] / count - global_mean * global_mean).clamp_(min=0)
        invstd = torch.rsqrt(global_var + eps)

        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(global_mean.to(running_mean.dtype), alpha=momentum)
        if running_var is not None:
            unbiased = global_var * (count / (count - 1))
            running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)

        shape = [1, channels] + [1] * (input.dim() - 2)
        mean_c = global_mean.to(input.dtype).view(shape)
        invstd_c = invstd.to(input.dtype).view(shape)
        output = (input - mean_c) * invstd_c
        if weight is not None:
            output = output * weight.view(shape)
        if bias is not None:
            output = output + bias.view(shape)

        ctx.save_for_backward(input, weight, mean_c, invstd_c)
        ctx.count = count
        ctx.process_set = process_set
        ctx.has_bias = bias is not None
        return output

    @staticmethod
    def backward(ctx, grad_output):
        input, weight, mean_c, invstd_c = ctx.saved_tensors
        channels = input.shape[1]
        dims = [0] + list(range(2, input.dim()))
        shape = mean_c.shape
        grad_output = grad_output.contiguous()
        centred = input - mean_c
        sum_dy = grad_output.sum(dim=dims)
        sum_dy_xmu = (grad_output * centred).sum(dim=dims)

        grad_input = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            stats = torch.cat([sum_dy.double(), sum_dy_xmu.double()])
            _allreduce_sum(stats, ctx.process_set)
            mean_dy = (stats[:channels] / ctx.count).to(input.dtype).view(shape)
            mean_dy_xmu = (stats[channels:] / ctx.count).to(input.dtype).view(shape)
            scale = invstd_c if weight is None else invstd_c * weight.view(shape)
            grad_input = (grad_output - mean_dy - centred * (invstd_c * invstd_c) * mean_dy_xmu) * scale
        if weight is not None and ctx.needs_input_grad[1]:
            grad_weight = sum_dy_xmu * invstd_c.view(channels)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = sum_dy
        return grad_input, grad_weight, grad_bias, None, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """Batch normalization over the combined batch of every rank.

    In training mode, the mean and variance are those of the batches of all
    ranks of ``process_set`` together (batch sizes may differ between
    ranks), and backward propagates through those statistics, so the result
    equals ``torch.nn.BatchNorm*d`` applied to the concatenated batch. The
    running statistics are updated from the combined statistics on every
    rank. In evaluation mode the running statistics are used and nothing is
    communicated. Works for inputs of shape ``(N, C)``, ``(N, C, L)``,
    ``(N, C, H, W)``, ... like ``BatchNorm1d/2d/3d``.

    Every rank must run the layer in training mode the same number of times,
    in the same order relative to other ``SyncBatchNorm`` layers.

    Args:
        num_features: ``C``, the number of channels.
        eps: added to the variance for numerical stability.
        momentum: the weight of the new batch's statistics in the running
            statistics; ``None`` gives a cumulative average.
        affine: whether the layer has a learnable weight and bias.
        track_running_stats: whether to keep running statistics (otherwise
            batch statistics are used in evaluation mode too).
        process_set: the ranks whose batches are combined (default: all).
    """

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: Optional[float] = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        process_set=global_process_set,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device=device, dtype=dtype)
        self.process_set = process_set

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(
                f"SyncBatchNorm: expected an input of at least 2 dimensions "
                f"(N, C, ...), got {input.dim()}D input"
            )
        if input.shape[1] != self.num_features:
            raise ValueError(
                f"SyncBatchNorm: expected {self.num_features} channels "
                f"(dimension 1), got input of size {list(input.shape)}"
            )

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked)
        use_batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        if not self.training or _set_size(self.process_set) == 1:
            # Nothing to combine: evaluation (each rank's own batch when there
            # are no running statistics, as torch's SyncBatchNorm does) or a
            # single rank.
            return torch.nn.functional.batch_norm(
                input,
                self.running_mean if not self.training or self.track_running_stats else None,
                self.running_var if not self.training or self.track_running_stats else None,
                self.weight,
                self.bias,
                use_batch_stats,
                factor,
                self.eps,
            )
        running_mean = self.running_mean if self.track_running_stats else None
        running_var = self.running_var if self.track_running_stats else None
        return _SyncBatchNormFunction.apply(
            input, self.weight, self.bias, running_mean, running_var, self.eps, factor, self.process_set
        )

    @classmethod
    def convert_sync_batchnorm(
        cls, module: torch.nn.Module, process_set=global_process_set
    ) -> torch.nn.Module:
        """Returns ``module`` with every ``BatchNorm*d`` layer replaced by a ``SyncBatchNorm``.

        Parameters and running statistics are carried over (shared, not copied).
        """
        converted = module
        if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
            converted = cls(
                module.num_features,
                module.eps,
                module.momentum,
                module.affine,
                module.track_running_stats,
                process_set=process_set,
            )
            if module.affine:
                with torch.no_grad():
                    converted.weight = module.weight
                    converted.bias = module.bias
            converted.running_mean = module.running_mean
            converted.running_var = module.running_var
            converted.num_batches_tracked = module.num_batches_tracked
            converted.training = module.training
        for name, child in module.named_children():
            converted.add_module(name, cls.convert_sync_batchnorm(child, process_set))
        return converted
