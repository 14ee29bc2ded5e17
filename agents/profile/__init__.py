"""`profile`: where a KernelBench problem's forward spends its time, line by line, against
this machine's measured ceilings. Entry points: `api.profile_file` (sandboxed),
`profiler.profile_model` (in-process), `command` (the CLI subcommand)."""
