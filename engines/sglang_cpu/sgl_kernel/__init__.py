"""A stand-in for SGLang's kernel library (``sgl_kernel``) on a CPU without its native build.

SGLang's CPU engine imports ``sgl_kernel`` at module level, but no CPU build of it is published. On a CPU
without AMX SGLang never calls a native kernel for a dense model (every call site sits behind
``cpu_has_amx_support()`` and falls back to PyTorch), so a name only has to resolve: any attribute of this
package or of a ``sgl_kernel.*`` submodule not defined here is a function that raises when called, naming
the kernel. The kernels a hybrid GDN model needs on the CPU, for which SGLang has no fallback, are written
in plain PyTorch in :mod:`sgl_kernel.mamba` and registered as ``torch.ops.sgl_kernel.*`` by
:mod:`sgl_kernel.ops`.
"""

from __future__ import annotations

from sgl_kernel._missing import install_module_finder, missing

install_module_finder(__name__)

from sgl_kernel import ops as _ops  # noqa: E402, F401  (registers torch.ops.sgl_kernel.*)


def __getattr__(name: str) -> object:
    if name.startswith("__"):
        raise AttributeError(name)
    return missing(f"{__name__}.{name}")
