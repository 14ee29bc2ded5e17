"""How much memory and work a problem needs at its sizes, and smaller sizes that fit.

KernelBench files ship GPU sizes (one level 1 input is 6.4 GB), so before a worker draws
real inputs the problem is traced on the meta device (agents/sizing/trace.py, inside the
worker or a sandboxed child: never in the parent) and refused with one line when it cannot
fit (check.py); `--size fit` (fit.py, resolved once by the parent through child.py and
api.py) scales its batch-like constants down until it does.
"""
