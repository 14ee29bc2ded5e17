"""The environment a candidate sees: an allow-list of what a compiler and a GPU need, then
ours (home, temp and every compiler cache inside directories the sandbox may write).

An allow-list, never a deny-list: a secret has any name (GITHUB_PAT, DATABASE_URL,
SLACK_WEBHOOK_URL), and only the names below reach a child. An allowed name that still looks
like a credential (`is_sensitive`) is dropped too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE")
PROVIDER_PREFIXES = (
    "ANTHROPIC",
    "OPENAI",
    "AZURE",
    "AWS",
    "GOOGLE",
    "GEMINI",
    "VERTEX",
    "HF_",
    "HUGGING",
    "MISTRAL",
    "GROQ",
    "TOGETHER",
    "DEEPSEEK",
    "COHERE",
    "OPENROUTER",
    "FIREWORKS",
    "XAI_",
    "OLLAMA",
    "VLLM",
    "LITELLM",
    "KERNEL_AGENT",
)

ALLOWED_NAMES = frozenset(
    {
        "PATH",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TERM",
        "TORCH_CUDA_ARCH_LIST",
        "CC",
        "CXX",
        "CUDAHOSTCXX",
        "LD_LIBRARY_PATH",
        "MAX_JOBS",
        "NCCL_NVLS_ENABLE",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST",
        "NVSHMEM_DISABLE_NVLS",
    }
)
"""Passed through from the parent's environment when present."""
ALLOWED_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "TRITON_")


def is_sensitive(name: str) -> bool:
    """True for any variable that may carry a credential or an LLM provider's setting."""
    upper = name.upper()
    return any(marker in upper for marker in SECRET_MARKERS) or upper.startswith(PROVIDER_PREFIXES)


def is_allowed(name: str) -> bool:
    """True for a variable a child may inherit: on the allow-list and not credential-like."""
    allowed = name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES)
    return allowed and not is_sensitive(name)


STEADY_MALLOC = {
    "MALLOC_MMAP_THRESHOLD_": str(32 * 1024**2),
    "MALLOC_TRIM_THRESHOLD_": str(1024**3),
    "MALLOC_TOP_PAD_": str(64 * 1024**2),
}
"""glibc's allocator kept in one steady state in every worker: blocks up to 32 MB come from
the heap and freed memory is kept, so a call's output reuses the pages the last one freed.
Left dynamic, the allocator's thresholds depend on each process's history, and whether a
16 MB output page-faults afresh (2x the call's time, seen on a layer norm) differed between
the reference's process and the candidate's, and from one run to the next."""


def sandbox_environment(
    *,
    home_root: Path,
    cache_dir: Path | None,
    threads: int,
    source: Mapping[str, str] | None = None,
    compiler_cache: Path | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The child's whole environment, as paths the child sees: HOME and TMPDIR under
    `home_root` (the jail's private tmpfs, or the scratch directory without a jail), the
    extension, Inductor and Triton caches in `cache_dir` (keyed by the candidate's source, so
    no candidate reads what another wrote) or under `home_root` without one. `extra` (a pool's
    CUDA_VISIBLE_DEVICES) passes the same filter.

    Inductor compiles in-process (one compile thread): with more it compiles in a pool of
    worker processes (torch._inductor.async_compile) that outlive the call, and the reviewer
    refuses any process a candidate leaves behind."""
    base = os.environ if source is None else source
    env = {name: value for name, value in base.items() if is_allowed(name)}
    env.update({name: value for name, value in (extra or {}).items() if not is_sensitive(name)})
    cache = cache_dir or home_root / "cache"
    shared = compiler_cache or cache
    env.update(
        {
            "HOME": str(home_root / "home"),
            "TMPDIR": str(home_root),
            "XDG_CACHE_HOME": str(home_root / "home" / ".cache"),
            "TORCH_EXTENSIONS_DIR": str(cache / "torch_extensions"),
            "TORCHINDUCTOR_CACHE_DIR": str(shared / "inductor"),
            "TRITON_CACHE_DIR": str(shared / "triton"),
            "TRITON_HOME": str(home_root / "home"),
            "TORCHINDUCTOR_COMPILE_THREADS": "1",
            "OMP_NUM_THREADS": str(threads),
            "MKL_NUM_THREADS": str(threads),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONNOUSERSITE": "1",
            "PYTHONUNBUFFERED": "1",
            **STEADY_MALLOC,
        }
    )
    return env


def scrubbed_environment(
    workdir: Path,
    build_cache: Path,
    threads: int,
    source: Mapping[str, str] | None = None,
    compiler_cache: Path | None = None,
) -> dict[str, str]:
    """`sandbox_environment` for a child that sees the host's paths (no jail): HOME and temp
    inside `workdir`, which it creates."""
    (workdir / "home").mkdir(parents=True, exist_ok=True)
    return sandbox_environment(
        home_root=workdir,
        cache_dir=build_cache,
        threads=threads,
        source=source,
        compiler_cache=compiler_cache,
    )
