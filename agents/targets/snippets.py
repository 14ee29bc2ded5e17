"""What a target still needs before it can be optimised, as one line and the code to add.

kernel-agent never guesses shapes: a target without `get_inputs()` (or a Triton kernel that
nothing launches) says exactly what to write, and the editor offers to insert it.
"""

from __future__ import annotations


def orphan_target(name: str, params: list[str]) -> tuple[str, str]:
    """A Triton kernel nothing launches cannot run on its own: what to add (a launcher)."""
    args = [p for p in params if not p.isupper()]
    constants = [f"{p}=..." for p in params if p.isupper()]
    snippet = (
        f"def launch_{name}({', '.join(args)}):\n"
        f"    # allocate the outputs, choose the grid and the constants, then launch {name}\n"
        f"    grid = ...  # e.g. (triton.cdiv(n_elements, BLOCK_SIZE),)\n"
        f"    {name}[grid]({', '.join(args + constants)})\n"
    )
    missing = (
        f"No Python function launches `{name}[grid](...)`: add a launcher (and get_inputs() "
        "with its arguments), then optimize the launcher."
    )
    return missing, snippet


def missing_inputs(name: str, params: list[str], kind: str, call: str) -> tuple[str, str]:
    """`get_inputs()` is absent: the arguments `call` needs, as a skeleton to fill in."""
    device = ', device="cuda"' if kind in ("triton", "cuda") else ""
    lines = ["def get_inputs():"]
    if kind == "module":
        lines.append(f"    # The inputs of {name}.forward, shaped and typed as in real use.")
    else:
        lines.append(f"    # The arguments {name} is called with, shaped and typed as in real use.")
    for param in params:
        lines.append(f"    {param} = torch.randn(...{device})  # replace ... with its shape")
    lines.append(f"    return [{', '.join(params)}]")
    missing = (
        f"Add get_inputs() to this file: kernel-agent runs {call} on the inputs it returns "
        "(it never guesses shapes)."
    )
    return missing, "\n".join(lines) + "\n"


def missing_init(name: str, params: list[str]) -> tuple[str, str]:
    """`get_init_inputs()` is absent: what the module's constructor is built with."""
    if params:
        body = (
            f"    # The arguments {name}(...) is built with: {', '.join(params)}.\n"
            f"    return [...]  # replace ... with {', '.join(params)}\n"
        )
    else:
        body = f"    return []  # {name}() takes no arguments\n"
    missing = f"Add get_init_inputs() to this file: kernel-agent builds {name}(*get_init_inputs())."
    return missing, "def get_init_inputs():\n" + body
