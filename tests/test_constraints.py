"""constraints.txt pins what a clean clone installs (Makefile, deploy/Dockerfile,
deploy/compose/podman-build.sh): every requirement of the extras `make install` asks for must
be pinned there, to one version that its pyproject.toml range allows. Otherwise a clean clone
resolves whatever the index holds that day, which is how a grpcio-tools release once broke
tests/test_protos_fresh.py between two CI runs 40 minutes apart."""
from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
INSTALLED_EXTRAS = ("dev", "torch")  # what the Makefile installs: -e '.[dev,torch]'


def pins(text: str) -> dict[str, Version]:
    """name -> pinned version of a constraints file; ValueError on a line that is no exact pin."""
    pinned: dict[str, Version] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        requirement = Requirement(line)
        specs = list(requirement.specifier)
        if len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version:
            raise ValueError(f"constraints.txt line {number}: {line!r} is not one exact pin")
        name = canonicalize_name(requirement.name)
        if name in pinned:
            raise ValueError(f"constraints.txt line {number}: {requirement.name} pinned twice")
        pinned[name] = Version(specs[0].version)
    return pinned


def unpinned(requirements: list[str], pinned: dict[str, Version]) -> list[str]:
    """The requirements that have no pin, or a pin outside their own range."""
    wrong = []
    for text in requirements:
        requirement = Requirement(text)
        version = pinned.get(canonicalize_name(requirement.name))
        if version is None:
            wrong.append(f"{requirement.name}: not in constraints.txt")
        elif not requirement.specifier.contains(version, prereleases=True):
            wrong.append(f"{requirement.name}: pinned {version}, pyproject.toml asks {requirement.specifier}")
    return wrong


def test_every_requirement_a_clean_clone_installs_is_pinned_within_its_range() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in INSTALLED_EXTRAS:
        requirements += project["optional-dependencies"][extra]
    assert unpinned(requirements, pins((ROOT / "constraints.txt").read_text())) == []


def test_the_check_names_a_missing_pin_a_pin_out_of_range_and_a_loose_line() -> None:
    pinned = pins("# header\nnumpy==2.4.6\ngrpcio-tools==1.85.1  # generator\n")
    assert unpinned(["numpy>=2.4,<3", "scipy>=1.14", "grpcio_tools==1.85.4"], pinned) == [
        "scipy: not in constraints.txt",
        "grpcio_tools: pinned 1.85.1, pyproject.toml asks ==1.85.4",
    ]
    for loose in ("numpy>=2.4", "numpy", "numpy==2.*"):
        try:
            pins(loose)
        except ValueError as error:
            assert "line 1" in str(error)
        else:
            raise AssertionError(f"{loose!r} accepted as a pin")


def test_the_images_and_the_makefile_install_with_the_constraints() -> None:
    assert "-c constraints.txt" in (ROOT / "Makefile").read_text()
    assert "-c constraints.txt" in (ROOT / "deploy/Dockerfile").read_text()
    assert "constraints.txt" in (ROOT / "deploy/compose/podman-build.sh").read_text()
