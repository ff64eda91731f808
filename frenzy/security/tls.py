"""A local certificate authority and server certificate for gRPC over TLS.

`frenzy up` makes them once under the security directory, the way k3s makes its own CA on a
first start: a self-signed CA (10 years), and a server certificate it signs (1 year) for
localhost, 127.0.0.1 and any extra names. Keys are ECDSA P-256. The client config carries the
CA certificate, so clients verify the server without a system trust store.
"""
from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from frenzy.security.store import write_private

CA_CERT, CA_KEY, SERVER_CERT, SERVER_KEY = "ca.crt", "ca.key", "server.crt", "server.key"


@dataclass(frozen=True)
class ServerTls:
    cert_pem: bytes
    key_pem: bytes
    ca_pem: bytes


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "frenzy"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_ca(days: int = 3650) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name("frenzy local CA"))
            .issuer_name(_name("frenzy local CA")).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def make_server_cert(ca_cert_pem: bytes, ca_key_pem: bytes, names: list[str],
                     days: int = 365) -> tuple[bytes, bytes]:
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    alt: list[x509.GeneralName] = []
    for name in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt.append(x509.DNSName(name))
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name(names[0])).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def ensure_server_tls(directory: Path, extra_names: list[str] | None = None) -> ServerTls:
    """The CA and server certificate under directory, made on first use."""
    names = ["localhost", "127.0.0.1", *(extra_names or [])]
    ca_cert, ca_key = directory / CA_CERT, directory / CA_KEY
    if not ca_cert.exists():
        cert_pem, key_pem = make_ca()
        write_private(ca_key, key_pem)
        write_private(ca_cert, cert_pem)
    server_cert, server_key = directory / SERVER_CERT, directory / SERVER_KEY
    if not server_cert.exists():
        cert_pem, key_pem = make_server_cert(ca_cert.read_bytes(), ca_key.read_bytes(), names)
        write_private(server_key, key_pem)
        write_private(server_cert, cert_pem)
    return load_server_tls(directory)


def load_server_tls(directory: Path) -> ServerTls:
    return ServerTls((directory / SERVER_CERT).read_bytes(), (directory / SERVER_KEY).read_bytes(),
                     (directory / CA_CERT).read_bytes())
