"""The devices a kernel can be verified and timed on: one list for every layer (memory sits
below agents/ and server/, so the list lives here where all of them may import it)."""

DEVICES = ("cpu", "cuda")
