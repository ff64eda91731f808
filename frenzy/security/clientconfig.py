"""The client config: where the cluster is, the token, and the CA that signed its certificate.

`frenzy up` writes it to <workdir>/client.json (mode 0600), the way k3s writes a kubeconfig,
and registers it per address under ~/.config/frenzy/clusters/, so a client given just the
address of a local cluster (tests, `frenzy demo`) finds its token too. Lookup order:
  token:   argument > FRENZY_TOKEN > config
  address: argument > FRENZY_ADDR > config > 127.0.0.1:50051
  config:  FRENZY_CONFIG > ./.frenzy/client.json > the registry entry for the address
           (127.0.0.1:50051 when none is given)
A config is used only when its address is the one being dialled (or none was given).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from frenzy.security.store import write_private

CLIENT_CONFIG_FILE = "client.json"
DEFAULT_ADDRESS = "127.0.0.1:50051"


@dataclass(frozen=True)
class ClientConfig:
    address: str
    token: str = ""
    ca_pem: str = ""  # empty: plaintext gRPC


def registry_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "frenzy" / "clusters"


def registry_path(address: str) -> Path:
    return registry_dir() / (address.replace(":", "_").replace("/", "_") + ".json")


def write_client_config(path: Path, config: ClientConfig) -> None:
    write_private(path, json.dumps(asdict(config), indent=2).encode())


def read_client_config(path: Path) -> ClientConfig | None:
    try:
        data = json.loads(path.read_text())
        return ClientConfig(str(data["address"]), str(data.get("token", "")),
                            str(data.get("ca_pem", "")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def resolve(address: str | None = None, token: str | None = None) -> ClientConfig:
    """The address, token and CA a client uses (see the module docstring for the order)."""
    wanted = address or os.environ.get("FRENZY_ADDR") or ""
    candidates = [Path(p) for p in [os.environ.get("FRENZY_CONFIG", "")] if p]
    candidates.append(Path(".frenzy") / CLIENT_CONFIG_FILE)
    candidates.append(registry_path(wanted or DEFAULT_ADDRESS))
    config = None
    for path in candidates:
        found = read_client_config(path)
        if found is not None and (not wanted or found.address == wanted):
            config = found
            break
    ca_pem = config.ca_pem if config else ""
    ca_file = os.environ.get("FRENZY_CA_FILE")
    if ca_file:
        ca_pem = Path(ca_file).read_text()
    return ClientConfig(
        address=wanted or (config.address if config else DEFAULT_ADDRESS),
        token=token or os.environ.get("FRENZY_TOKEN") or (config.token if config else ""),
        ca_pem=ca_pem)
