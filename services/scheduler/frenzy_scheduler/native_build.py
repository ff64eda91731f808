"""Build the scheduler's compiled hot modules: `make native`, or
`python -m frenzy_scheduler.native_build`.

Compiles `frenzy_scheduler.native.MODULES` from their unchanged Python source with mypyc (the
`native` extra: mypy, and a C compiler) into `native_dir()`, and writes the manifest that
`frenzy_scheduler.native.extend` checks before using them. Each module is its own group
(`separate`), so every library lands beside its module in the package tree. Exit status 0
when built, 1 when the build failed (the scheduler then runs as Python, which is correct,
only slower), 2 for bad arguments.
"""
from __future__ import annotations

import argparse
import importlib
import io
import json
import os
import shutil
import sys
import tempfile
import time
from contextlib import chdir, redirect_stdout
from pathlib import Path

from frenzy_scheduler import native

ROOT = Path(__file__).resolve().parents[3]  # the checkout (mypy's search path for `frenzy`)


def sources() -> dict[str, Path]:
    """module -> its Python source file, found on its package's search path (which holds a
    previous build too, when that is fresh: no .py there)."""
    found = {}
    for name in native.MODULES:
        package, _, leaf = name.rpartition(".")
        paths = [Path(entry) / f"{leaf}.py" for entry in importlib.import_module(package).__path__]
        source = next((path for path in paths if path.is_file()), None)
        if source is None:
            raise RuntimeError(f"{name}: no Python source found")
        found[name] = source
    return found


def source_root(module: str, source: Path) -> Path:
    """The directory the module's top package sits in (mypy's search path for it)."""
    return source.parents[module.count(".")]


def build(out_dir: Path, verbose: bool = False) -> dict[str, str]:
    """Compile into a fresh `out_dir` (replaced only once the build succeeded); returns the
    manifest's modules."""
    from mypyc.build import mypycify
    from setuptools import setup

    found = sources()
    # mypy finds an installed package itself, and refuses site-packages on its search path
    roots = {str(source_root(m, p)) for m, p in found.items()}
    if (ROOT / "frenzy").is_dir():  # a checkout: the runtime package beside services/
        roots.add(str(ROOT))
    search_path = sorted(path for path in roots if "-packages" not in Path(path).name)
    with tempfile.TemporaryDirectory(prefix="frenzy-native-") as work:
        staging = Path(work) / "lib"
        os.environ["MYPYPATH"] = os.pathsep.join(search_path)
        log = io.StringIO()  # the type check's and the compiler's commands: shown on failure
        try:
            with chdir(work), redirect_stdout(log if not verbose else sys.stdout):
                extensions = mypycify(
                    ["--follow-imports=silent", "--ignore-missing-imports"]
                    + [str(found[m]) for m in native.MODULES],
                    opt_level="3", separate=True, target_dir=str(Path(work) / "c"))
                setup(name="frenzy-native", ext_modules=extensions,
                      script_args=["build_ext", "--build-lib", str(staging),
                                   "--build-temp", str(Path(work) / "tmp")])
        except (Exception, SystemExit):
            print(log.getvalue()[-6000:], file=sys.stderr)
            raise
        modules = {m: native.source_digest(p) for m, p in found.items()}
        (staging / native.MANIFEST).write_text(json.dumps(
            {"python": native.python_tag(), "modules": modules,
             "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=1) + "\n")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(staging, out_dir)
    return modules


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m frenzy_scheduler.native_build",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None, help="where to build (default: "
                        "FRENZY_NATIVE_DIR, else the package's _native)")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    out_dir = args.out if args.out is not None else native.native_dir()
    started = time.monotonic()
    try:
        modules = build(out_dir, args.verbose)
    except (Exception, SystemExit) as exc:  # distutils reports a compiler failure as SystemExit
        print(f"native build failed ({type(exc).__name__}: {exc}); the scheduler runs as Python",
              file=sys.stderr)
        return 1
    print(f"compiled {len(modules)} modules into {out_dir} in {time.monotonic() - started:.0f} s",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
