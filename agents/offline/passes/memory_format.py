"""channels_last for convolution stacks: NHWC (NDHWC for 3-D, channels_last_3d) activations
and weights let oneDNN (CPU) and cuDNN (GPU) run convolutions without reordering to and from
NCHW around every conv.

The parameters are converted on the first forward, not in `__init__`, and re-checked on every
call (a few stride tests): `load_state_dict` copies into the existing storage and keeps its
strides, so a reload keeps the layout, but `load_state_dict(assign=True)` or `.to()` with a
new tensor would not. Only strides change, never shapes or names, so the state_dict keys and
shapes are exactly the original's. 4-D and 5-D tensor inputs are converted with a copy (never in
place: the reviewer checks that inputs are unchanged) and, when the original returns
standard-contiguous tensors, the outputs are made contiguous again.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import torch

from agents.offline.passes import wrapping
from agents.offline.passes.base import PassError, Program, Rewrite

_CONV_MODULES = (
    torch.nn.Conv2d,
    torch.nn.ConvTranspose2d,
    torch.nn.LazyConv2d,
    torch.nn.Conv3d,
    torch.nn.ConvTranspose3d,
    torch.nn.LazyConv3d,
)
_CONV_CALLS = re.compile(r"\bconv(_transpose)?[23]d\s*\(")

_HELPERS = '''
_LAST = {4: torch.channels_last, 5: torch.channels_last_3d}


def _channels_last_weights(module):
    """Every 4-D (5-D) parameter and buffer in channels_last (_3d); a no-op once they are."""
    for tensor in [*module.parameters(), *module.buffers()]:
        layout = _LAST.get(tensor.dim())
        if layout is not None and not tensor.is_contiguous(memory_format=layout):
            tensor.data = tensor.data.contiguous(memory_format=layout)


def _channels_last(value):
    """A 4-D (5-D) floating tensor as an NHWC (NDHWC) copy; the caller's is left as it is."""
    if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dim() in _LAST:
        return value.contiguous(memory_format=_LAST[value.dim()])
    return value
'''

_STANDARD = '''

def _standard_layout(value):
    """Outputs back in the standard contiguous layout that the original returns."""
    if isinstance(value, torch.Tensor):
        return value.contiguous()
    if isinstance(value, tuple | list):
        return type(value)(_standard_layout(item) for item in value)
    return value
'''


class ChannelsLast:
    name = "channels-last"

    def apply(self, program: Program) -> Rewrite:
        if "channels_last" in program.source:
            return Rewrite(None, "the kernel already chooses memory formats itself")
        if not _has_conv(program):
            return Rewrite(
                None, "no 2-D or 3-D convolution: channels_last only changes conv layouts"
            )
        wrapped = wrapping.wrap(program, "_forward")
        tensors = [name for name in wrapped.tensor_names if _is_image(program, name, wrapped)]
        if not tensors:
            return Rewrite(None, "no 4-D or 5-D tensor input to convert to channels_last")
        standard = _returns_standard_layout(program)
        body = ["_channels_last_weights(self)"]
        body += [f"{name} = _channels_last({name})" for name in tensors]
        result = f"self.{wrapped.inner}({wrapped.call})"
        body.append(f"return _standard_layout({result})" if standard else f"return {result}")
        source = wrapping.module(
            wrapped,
            wrapping.forward_method(wrapped, body),
            doc="The original forward on channels_last (NHWC) weights and activations.",
            prelude_extra=_HELPERS + (_STANDARD if standard else ""),
        )
        changes = [f"input {name} -> channels_last" for name in tensors]
        changes.append("4-D/5-D parameters -> channels_last(_3d) on first forward")
        if standard:
            changes.append("outputs made contiguous again, as the original returns them")
        return Rewrite(source, "conv stack run in channels_last", changes, method="source")


def _has_conv(program: Program) -> bool:
    module = program.module
    if module is not None and any(isinstance(m, _CONV_MODULES) for m in module.modules()):
        return True
    return bool(_CONV_CALLS.search(program.source))


def _is_image(program: Program, name: str, wrapped: wrapping.Wrapped) -> bool:
    index = wrapped.tensor_names.index(name)
    if index >= len(program.inputs):
        return False
    value = program.inputs[index]
    return isinstance(value, torch.Tensor) and value.dim() in (4, 5) and value.is_floating_point()


def _returns_standard_layout(program: Program) -> bool:
    """Run the original once: does it return standard-contiguous tensors?"""
    if program.module is None:
        raise PassError("no module to run")
    arguments = [x.clone() if isinstance(x, torch.Tensor) else x for x in program.inputs]
    with torch.no_grad():  # on a copy: a forward may update buffers (BatchNorm statistics)
        output = copy.deepcopy(program.module)(*arguments)
    return all(t.is_contiguous() for t in _tensors(output))


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, tuple | list):
        return [t for item in value for t in _tensors(item)]
    return []
