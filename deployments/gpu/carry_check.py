"""What the GPU acceptance script's carried leg needs of the node it runs on, checked there before anything else:
the distributions it takes from the node's own image (node-image.txt), the carried wheels (carry.txt) at their pinned
versions, and every requirement of those wheels (extras aside). Standard library and `packaging` only, so it runs
before anything else is known to be there.

    PYTHONPATH=<where the wheels went> python3 deployments/gpu/carry_check.py   # exit 1, naming each problem
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

CARRY = Path(__file__).with_name("carry.txt")            # the carried wheels, pinned
NODE_IMAGE = Path(__file__).with_name("node-image.txt")   # what the leg takes from the node's own image


def _lines(path: Path) -> list[str]:
    return [line for raw in path.read_text().splitlines() if (line := raw.split("#", 1)[0].strip())]


def carried() -> list[tuple[str, str]]:
    """(distribution, version) of every pin in carry.txt."""
    return [(name.strip(), version.strip()) for name, _, version in (line.partition("==") for line in _lines(CARRY))]


def check() -> list[str]:
    """What is wrong with this interpreter's environment for the leg: a distribution it takes from the node's image
    that is not there, each carried wheel missing or at another version, and each requirement of one (extras aside)
    that nothing here meets. Empty when all is well."""
    problems = [f"{name} (node-image.txt) is not installed on this node: pin it in carry.txt"
                for name in _lines(NODE_IMAGE) if not _version(name)]
    for name, version in carried():
        found = _version(name)
        if found is None:
            problems.append(f"{name}=={version} (carry.txt) is not installed")
        elif found != version:
            problems.append(f"{name} is {found} here, carry.txt pins {version}")
        if found is not None and _version("packaging"):   # without it, the line above names packaging already
            problems += _unmet(name)
    return problems


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _unmet(name: str) -> list[str]:
    """The requirements of distribution `name` (extras aside) that nothing here meets."""
    from packaging.requirements import Requirement

    out = []
    for text in metadata.requires(name) or []:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        have = _version(req.name)
        if have is None:
            out.append(f"{name} needs {req}, which is not installed: add it to carry.txt")
        elif req.specifier and not req.specifier.contains(have, prereleases=True):
            out.append(f"{name} needs {req}, found {req.name} {have}: pin a fitting one in carry.txt")
    return out


def torch_line() -> str:
    """The node's torch and what it sees, for the table."""
    import torch

    cuda = torch.cuda.is_available()
    return (f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
            + (f"GPU {torch.cuda.get_device_name(0)}" if cuda else "no GPU visible to torch"))


def main() -> int:
    problems = check()
    print("\n".join(problems or [f"{len(carried())} carried distributions, their requirements and "
                                  f"{len(_lines(NODE_IMAGE))} of the node's own: all there"]))
    try:
        print(torch_line())
    except ImportError as e:
        print(f"no torch: {e}")
        return 1
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
