"""``python -m benchmarks.bare_trace CONFIG``: the baseline of the 70B rows, bare torchax tracing.

Imports torch, jax and torchax, builds the Llama sample's CONFIG on the meta device with its
caches, and traces it with `jax.make_jaxpr` (no jaxside in the way) at the inputs the 70B
command traces: what an `annotate --abstract --export` of the same config costs at least.

With ``--lean``, the collector is off and the process ends without freeing its heap
(`os._exit`), as jaxside's own runs do (`annotate.collecting`): about 2 s of a plain run's CPU at
70B is Python's collector and teardown, and the lean baseline shows what is left without them.
"""

from __future__ import annotations

import gc
import os
import sys


def main(config: str) -> int:
    import jax
    import torch

    from benchmarks import models
    from jaxside.tracing import _internals

    llama_model = models.load_llama()
    model = llama_model.build(config, device="meta")
    inputs = (torch.zeros(1, 8, dtype=torch.long), torch.arange(8))
    tensors = [t for _, t in model.named_parameters()] + [t for _, t in model.named_buffers()]
    shapes = [jax.ShapeDtypeStruct(tuple(t.shape), _internals.to_jax_dtype(t.dtype))
              for t in [*tensors, *inputs]]
    closed = jax.make_jaxpr(models.bare_function(model))(*shapes)
    return 0 if closed.jaxpr.eqns else 1


if __name__ == "__main__":
    arguments = [a for a in sys.argv[1:] if a != "--lean"]
    if "--lean" not in sys.argv:
        raise SystemExit(main(arguments[0] if arguments else "70B"))
    gc.disable()
    code = main(arguments[0] if arguments else "70B")
    sys.stdout.flush()
    os._exit(code)
