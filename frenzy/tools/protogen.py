"""Generate frenzy/v1/*_pb2*.py from protos/frenzy/v1/*.proto: `make proto` or `python -m frenzy.tools.protogen`."""
from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = ROOT / "protos"


def generate(out_dir: Path) -> list[Path]:
    """Write the generated modules under out_dir/frenzy/v1; returns the proto files compiled."""
    from grpc_tools import protoc

    protos = sorted((PROTO_DIR / "frenzy" / "v1").glob("*.proto"))
    include = str(resources.files("grpc_tools") / "_proto")
    args = ["protoc", f"-I{PROTO_DIR}", f"-I{include}", f"--python_out={out_dir}",
            f"--pyi_out={out_dir}", f"--grpc_python_out={out_dir}"]
    if protoc.main(args + [str(p.relative_to(PROTO_DIR)) for p in protos]) != 0:
        raise RuntimeError("protoc failed")
    return protos


def main() -> None:
    protos = generate(ROOT)
    (ROOT / "frenzy" / "v1" / "__init__.py").write_text('"""Generated from protos/frenzy/v1. Do not edit; run `make proto`."""\n')
    print(f"generated {len(protos)} protos into frenzy/v1", file=sys.stderr)


if __name__ == "__main__":
    main()
