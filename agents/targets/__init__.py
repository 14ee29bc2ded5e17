"""Optimisation targets in a Python file, read from its syntax tree alone: finding them
(`find`, `analysis`, `facts`), their static hints (`hints`), turning one into a KernelBench
problem (`synth`), naming one on the command line (`load`), and the edit that puts a
verified rewrite back into the file (`edits`). The editor and the command line share it;
nothing here knows of the language server protocol."""
