"""Signed Kafka records: Ed25519 for services and agents, HMAC for tenants' pipelines.

A signature covers the record as it travels: its logical topic (no namespace), key, value and
expiry, and names its signer. So a record cannot be moved to another topic, re-keyed to another
node, edited, or kept for later. Replays within the expiry are caught by `ReplayCache` on the
record's id (the envelope's event id, or the HMAC itself for a pipeline's record).

Headers (all ASCII):
  x-frenzy-signer   who signed: "orchestrator", "node/<node id>" or "tenant/<key id>"
  x-frenzy-expires  unix seconds after which the record is refused
  x-frenzy-sig      base64 Ed25519 signature, or
  x-frenzy-hmac     base64 HMAC-SHA256 (pipelines)

The idea follows Kubernetes' bootstrap-token signed ConfigMap (an HMAC over the payload with a
token-named key) and JWT's exp claim; the canonical bytes are length-prefixed so that no two
(topic, key, value) triples encode alike.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections import OrderedDict
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

Headers = list[tuple[str, bytes]]
SIGNER, EXPIRES, SIG, HMAC_HEADER = "x-frenzy-signer", "x-frenzy-expires", "x-frenzy-sig", "x-frenzy-hmac"
SIGNATURE_HEADERS = (SIGNER, EXPIRES, SIG, HMAC_HEADER)
ORCHESTRATOR_SIGNER = "orchestrator"


def node_signer(node_id: str) -> str:
    return f"node/{node_id}"


def tenant_signer(key_id: str) -> str:
    return f"tenant/{key_id}"


def canonical(topic: str, key: bytes, value: bytes, expires_s: int, signer: str) -> bytes:
    """The bytes a signature covers: each field length-prefixed, in a fixed order."""
    parts = [b"frenzy-record-v1", topic.encode(), key, value, str(expires_s).encode(), signer.encode()]
    return b"".join(len(p).to_bytes(4, "big") + p for p in parts)


def header(headers: Headers | None, name: str) -> str:
    for key, value in headers or ():
        if key == name:
            return value.decode("ascii", errors="replace")
    return ""


def strip_signature(headers: Headers | None) -> Headers:
    return [(k, v) for k, v in headers or () if k not in SIGNATURE_HEADERS]


# ----- keys ------------------------------------------------------------------------------------
def new_private_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def private_key_pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def load_private_key(pem: bytes) -> Ed25519PrivateKey:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError("not an Ed25519 private key")
    return key


def public_key_raw(key: Ed25519PrivateKey | Ed25519PublicKey) -> bytes:
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def load_public_key(raw_or_b64: bytes | str) -> Ed25519PublicKey:
    raw = base64.b64decode(raw_or_b64) if isinstance(raw_or_b64, str) else raw_or_b64
    return Ed25519PublicKey.from_public_bytes(raw)


# ----- signing ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Ed25519Signer:
    """Signs the records one service or agent produces onto the topics in `ttls_s`.

    Each topic has its own validity: a command is refused a minute after it was sent (the
    orchestrator re-drives a job whose command got lost), while state records (status,
    heartbeats, availability) stay valid long enough to survive a consumer's restart; their
    replays are stopped by versions, attempts and sequence order instead.
    """

    key: Ed25519PrivateKey
    signer: str
    ttls_s: dict[str, float]  # logical topic name -> validity

    @property
    def topics(self) -> frozenset[str]:
        return frozenset(self.ttls_s)

    def headers(self, topic: str, key: bytes, value: bytes, now_s: float | None = None) -> Headers:
        ttl_s = self.ttls_s.get(topic)
        if ttl_s is None:
            return []
        expires_s = int((now_s if now_s is not None else time.time()) + ttl_s)
        sig = self.key.sign(canonical(topic, key, value, expires_s, self.signer))
        return [(SIGNER, self.signer.encode()), (EXPIRES, str(expires_s).encode()),
                (SIG, base64.b64encode(sig))]


def pipeline_headers(key_id: str, secret: bytes, topic: str, key: bytes, value: bytes,
                     ttl_s: float = 300.0, now_s: float | None = None) -> Headers:
    """The headers a pipeline adds to a JobSubmitted it produces straight onto Kafka.

    key_id and secret come from `frenzy token create --kind pipeline`.
    """
    signer = tenant_signer(key_id)
    expires_s = int((now_s if now_s is not None else time.time()) + ttl_s)
    mac = hmac.new(secret, canonical(topic, key, value, expires_s, signer), hashlib.sha256).digest()
    return [(SIGNER, signer.encode()), (EXPIRES, str(expires_s).encode()),
            (HMAC_HEADER, base64.b64encode(mac))]


# ----- verification ----------------------------------------------------------------------------
class ReplayCache:
    """Record ids seen until their expiry; a second sighting before then is a replay."""

    def __init__(self, capacity: int = 200_000) -> None:
        self.capacity = capacity
        self._expiry_s: OrderedDict[str, float] = OrderedDict()

    def first_time(self, record_id: str, expires_s: float, now_s: float) -> bool:
        while self._expiry_s:  # drop the expired from the oldest end
            oldest, expiry = next(iter(self._expiry_s.items()))
            if expiry >= now_s and len(self._expiry_s) < self.capacity:
                break
            self._expiry_s.popitem(last=False)
        if record_id in self._expiry_s:
            return False
        self._expiry_s[record_id] = expires_s
        return True


class VerifyError(ValueError):
    """Why a record's signature is not accepted; the record is dead-lettered with this reason."""


def _expiry(headers: Headers | None, now_s: float, max_ttl_s: float) -> int:
    raw = header(headers, EXPIRES)
    if not raw:
        raise VerifyError("unsigned: no x-frenzy-expires header")
    try:
        expires_s = int(raw)
    except ValueError:
        raise VerifyError(f"bad x-frenzy-expires {raw[:40]!r}") from None
    if expires_s < now_s:
        raise VerifyError(f"expired {now_s - expires_s:.0f}s ago")
    if expires_s > now_s + max_ttl_s + 60:  # 60 s of clock skew
        raise VerifyError("expiry too far in the future")
    return expires_s


def verify_ed25519(public_keys: dict[str, Ed25519PublicKey], topic: str, key: bytes,
                   value: bytes, headers: Headers | None, now_s: float,
                   max_ttl_s: float) -> tuple[str, int]:
    """Check an Ed25519-signed record; returns (signer, expiry) or raises VerifyError.

    public_keys maps each trusted signer (e.g. "orchestrator", "node/n1") to its key.
    """
    signer = header(headers, SIGNER)
    sig_b64 = header(headers, SIG)
    if not signer or not sig_b64:
        raise VerifyError("unsigned: no x-frenzy-signer / x-frenzy-sig header")
    public = public_keys.get(signer)
    if public is None:
        raise VerifyError(f"unknown signer {signer[:80]!r}")
    expires_s = _expiry(headers, now_s, max_ttl_s)
    try:
        public.verify(base64.b64decode(sig_b64, validate=True),
                      canonical(topic, key, value, expires_s, signer))
    except (InvalidSignature, ValueError):
        raise VerifyError(f"forged: bad signature for signer {signer!r}") from None
    return signer, expires_s


def verify_hmac(secrets: dict[str, bytes], topic: str, key: bytes, value: bytes,
                headers: Headers | None, now_s: float, max_ttl_s: float) -> tuple[str, int, str]:
    """Check a pipeline's HMAC; returns (key id, expiry, mac) or raises VerifyError.

    secrets maps a pipeline key id to its secret.
    """
    signer = header(headers, SIGNER)
    mac_b64 = header(headers, HMAC_HEADER)
    if not signer or not mac_b64:
        raise VerifyError("unsigned: a record produced onto this topic needs x-frenzy-signer and "
                          "x-frenzy-hmac headers (frenzy token create --kind pipeline)")
    key_id = signer.removeprefix("tenant/")
    secret = secrets.get(key_id) if signer.startswith("tenant/") else None
    if secret is None:
        raise VerifyError(f"unknown signer {signer[:80]!r}")
    expires_s = _expiry(headers, now_s, max_ttl_s)
    want = hmac.new(secret, canonical(topic, key, value, expires_s, signer), hashlib.sha256).digest()
    try:
        got = base64.b64decode(mac_b64, validate=True)
    except ValueError:
        raise VerifyError("forged: x-frenzy-hmac is not base64") from None
    if not hmac.compare_digest(want, got):
        raise VerifyError(f"forged: bad HMAC for signer {signer!r}")
    return key_id, expires_s, mac_b64


def join_proof(secret: bytes, node_id: str, public_key: bytes, issued_at_s: int) -> bytes:
    """What an agent proves its join token with (AgentJoin.proof)."""
    message = canonical("agent-join", node_id.encode(), public_key, issued_at_s, "join")
    return hmac.new(secret, message, hashlib.sha256).digest()
