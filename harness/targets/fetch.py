"""``lastcall fetch NAME==VERSION``: a pinned source distribution, downloaded once into a cache.

kvcached cannot be pip-installed on a CPU machine (its setup.py needs CUDA), but
its sdist unpacks, and its pure-Python modules import once its compiled VMM ops
are replaced by the harness's stubs.  This module finds the sdist with PyPI's
JSON API, downloads it, checks its sha256 against the hash recorded here (an
unrecorded version is checked against PyPI's own digest and the hash printed so
it can be pinned), and unpacks it (tarfile's ``data`` filter: no links out, no
absolute paths) into ``$LASTCALL_CACHE`` (default ``~/.cache/lastcall``) as
``NAME-VERSION/``.  A second fetch finds the tree and does nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile
import urllib.request
from pathlib import Path
from urllib.parse import urljoin

from harness import envvars
from harness.errors import ConfigError

__all__ = ["PINNED", "cache_dir", "cached_source", "fetch", "parse_pin"]

PINNED: dict[tuple[str, str], str] = {  # (name, version) -> sha256 of the sdist, as recorded when first fetched
    ("kvcached", "0.1.5"): "1c82029fff197b5fa8a16b1e3dde9584844a446d996cf1fcefbeb0474b443614",
    ("kvcached", "0.1.6"): "4a1a428244b5e3667841e28f03a4a20be7066a21a856b2deaef727e18f845068",
}
INDEX = envvars.text("LASTCALL_PYPI") or "https://pypi.org"
MARKER = ".lastcall-sha256"


def cache_dir() -> Path:
    return Path(envvars.text("LASTCALL_CACHE") or Path.home() / ".cache" / "lastcall")


def parse_pin(spec: str) -> tuple[str, str]:
    """``kvcached==0.1.6`` -> ("kvcached", "0.1.6"); ConfigError naming the form otherwise."""
    from harness.targets.names import is_version

    name, sep, version = spec.partition("==")
    if not sep or not name.strip() or not version.strip():
        raise ConfigError(f"{spec!r}: give NAME==VERSION, e.g. kvcached==0.1.6")
    name, version = name.strip(), version.strip()
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) or not is_version(version):
        raise ConfigError(f"{spec!r}: give NAME==VERSION with a PEP 440 version in its normal form, e.g. "
                          "kvcached==0.1.6")
    return name, version


def cached_source(name: str, version: str) -> Path | None:
    """The unpacked tree of NAME==VERSION in the cache (the folder holding the package), or None."""
    where = cache_dir() / f"{name}-{version}"
    return where if (where / MARKER).is_file() else None


def fetch(spec: str, *, log: bool = True) -> Path:
    """Download and unpack NAME==VERSION's sdist into the cache once; its tree.

    Error handling: ConfigError for a bad spec, an unknown version, no sdist, a
    download that fails or a hash that does not match (nothing is left in the cache).
    """
    name, version = parse_pin(spec)
    have = cached_source(name, version)
    if have is not None:
        return have
    try:
        with urllib.request.urlopen(f"{INDEX}/pypi/{name}/json", timeout=60) as r:
            meta = json.load(r)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {INDEX}/pypi/{name}/json: {exc}") from None
    files = meta.get("releases", {}).get(version)
    if not files:
        near = sorted(meta.get("releases", {}))[-5:]
        raise ConfigError(f"{name} has no release {version!r} on {INDEX}; recent: {', '.join(near)}")
    sdist = next((f for f in files if f.get("packagetype") == "sdist"), None)
    if sdist is None:
        raise ConfigError(f"{name}=={version} has no sdist on {INDEX}")
    url = urljoin(f"{INDEX}/pypi/{name}/json", sdist["url"])
    want = PINNED.get((name, version)) or sdist["digests"]["sha256"]
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=".fetch-") as tmp:
        archive = Path(tmp) / sdist["filename"]
        try:
            with urllib.request.urlopen(url, timeout=120) as r, open(archive, "wb") as out:
                shutil.copyfileobj(r, out)
        except OSError as exc:
            raise ConfigError(f"cannot download {url}: {exc}") from None
        got = hashlib.sha256(archive.read_bytes()).hexdigest()
        if got != want:
            raise ConfigError(f"{sdist['filename']}: sha256 {got} does not match the recorded {want}; not used")
        with tarfile.open(archive) as tar:
            tar.extractall(Path(tmp) / "x", filter="data")
        tops = list((Path(tmp) / "x").iterdir())
        tree = tops[0] if len(tops) == 1 and tops[0].is_dir() else Path(tmp) / "x"
        (tree / MARKER).write_text(got + "\n")
        dest = root / f"{name}-{version}"
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(tree, dest)
    if log and (name, version) not in PINNED:
        print(f"note: {name}=={version} is not pinned in harness/targets/fetch.py; its sha256 is {got}")
    return dest
