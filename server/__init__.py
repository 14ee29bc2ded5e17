"""The Kernel Agent language server (pygls): a thin protocol shell over `agents` and `memory`."""
