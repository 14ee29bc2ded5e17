"""The `__global__` kernels in the CUDA source strings of a `load_inline` extension, found
by parsing those strings with tree-sitter-cuda (the Python tree sees only a string)."""

from __future__ import annotations

import threading

import tree_sitter_cuda
from tree_sitter import Language, Node, Parser

from agents.targets.model import Kernel
from agents.targets.syntax import node_text, walk

CUDA_LANGUAGE = Language(tree_sitter_cuda.language())
_CUDA_PARSER = Parser(CUDA_LANGUAGE)
_CUDA_LOCK = threading.Lock()


def _string_parts(node: Node) -> list[Node]:
    return [
        part
        for string in ([node] if node.type == "string" else node.named_children)
        for part in string.named_children
        if part.type == "string_content"
    ]


def global_functions(string: Node) -> list[Kernel]:
    """`__global__` functions of a CUDA source string, at their lines in the document."""
    kernels: list[Kernel] = []
    for part in _string_parts(string):
        with _CUDA_LOCK:
            tree = _CUDA_PARSER.parse(part.text or b"")
        row = part.start_point.row
        for node in walk(tree.root_node):
            if node.type != "function_definition":
                continue
            if not any(child.type == "__global__" for child in node.children):
                continue
            declarator = node.child_by_field_name("declarator")
            while declarator is not None and declarator.type != "function_declarator":
                declarator = declarator.child_by_field_name("declarator")
            name_node = declarator.child_by_field_name("declarator") if declarator else None
            kernels.append(
                Kernel(
                    name=node_text(name_node) or "kernel",
                    language="cuda",
                    start_line=row + node.start_point.row,
                    end_line=row + node.end_point.row,
                )
            )
    return kernels
