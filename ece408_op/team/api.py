"""What a team's ``launch.py`` returns: its launch plan for one layer, as plain data.

    from ece408_op.team import kernel, constant, workspace

    def launch(B, M, C, H, W, K):
        H_out, W_out = H - K + 1, W - K + 1
        return [
            constant("c_k", "k"),                       # copy the weights into __constant__ c_k
            workspace("unrolled", B * C * K * K * H_out * W_out * 4),
            kernel("unroll", grid=(...), block=(256, 1, 1), args=("unrolled", "x", B, C, H, W, K)),
            kernel("forward_kernel", grid=(...), block=(16, 16, 1), shared=0,
                   args=("y", "unrolled", "k", B, M, C, H, W, K)),
        ]

Steps run in order on the layer's stream (``stream=1..3``: other streams, joined before the
layer ends). Kernel arguments: a buffer name (``"y"``, ``"x"``, ``"k"`` or a workspace) is its
device pointer; a Python int is a 32-bit ``int``; a float a ``float``; ``i64(n)`` a ``long long``.
These helpers only build dictionaries: ``launch`` may return the dictionaries itself.
"""


def kernel(name, grid, block, shared=0, args=(), stream=0):
    """Launch ``__global__`` function ``name`` (declared ``extern "C"``) with this grid and block,
    ``shared`` bytes of dynamic shared memory and these arguments."""
    return {"kernel": name, "grid": list(grid), "block": list(block), "shared": shared, "args": list(args),
            "stream": stream}


def constant(symbol, source="k"):
    """Copy buffer ``source`` (the weights ``"k"`` by default) into ``__constant__`` array ``symbol``
    (inside Op Time, as the course's constant-memory kernels did)."""
    return {"constant": symbol, "source": source}


def workspace(name, nbytes):
    """A device buffer of ``nbytes`` bytes for the layer, named ``name`` in kernel arguments
    (allocated by the harness, zero-filled when first allocated)."""
    return {"workspace": name, "bytes": nbytes}


def i64(value):
    """A 64-bit integer kernel argument (``long long``)."""
    return {"i64": value}


def f32(value):
    """A 32-bit float kernel argument (plain Python floats are float32 too)."""
    return {"f32": value}
