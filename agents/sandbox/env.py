"""The environment a candidate sees: credentials scrubbed, caches pointed at our directories."""

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


def is_sensitive(name: str) -> bool:
    """True for any variable that may carry a credential or an LLM provider's setting."""
    upper = name.upper()
    return any(marker in upper for marker in SECRET_MARKERS) or upper.startswith(PROVIDER_PREFIXES)


def scrubbed_environment(
    workdir: Path,
    build_cache: Path,
    threads: int,
    source: Mapping[str, str] | None = None,
    compiler_cache: Path | None = None,
) -> dict[str, str]:
    """A copy of the environment without credentials, with HOME, temp and every compiler
    cache inside directories the sandbox may write. Extensions build in `build_cache` (keyed
    by the candidate's source); Inductor and Triton share `compiler_cache`, whose hits
    (headers, common kernels) save seconds per candidate, and whose entries are only ever
    trusted after the verifier has checked what they compute. Inductor compiles in-process
    (one compile thread): with more, it compiles Triton kernels in a pool of worker processes
    (torch._inductor.async_compile) that outlive the call, and the reviewer refuses any process
    a candidate leaves behind."""
    shared = compiler_cache or build_cache
    base = os.environ if source is None else source
    env = {name: value for name, value in base.items() if not is_sensitive(name)}
    home = workdir / "home"
    home.mkdir(exist_ok=True)
    env.update(
        {
            "HOME": str(home),
            "TMPDIR": str(workdir),
            "XDG_CACHE_HOME": str(workdir / "cache"),
            "TORCH_EXTENSIONS_DIR": str(build_cache / "torch_extensions"),
            "TORCHINDUCTOR_CACHE_DIR": str(shared / "inductor"),
            "TRITON_CACHE_DIR": str(shared / "triton"),
            "TORCHINDUCTOR_COMPILE_THREADS": "1",
            "OMP_NUM_THREADS": str(threads),
            "MKL_NUM_THREADS": str(threads),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONNOUSERSITE": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    for name in ("PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "LD_PRELOAD"):
        env.pop(name, None)
    return env
