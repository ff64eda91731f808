"""Per-tenant token buckets for gRPC calls (answered RESOURCE_EXHAUSTED when empty)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TokenBucket:
    rate_per_s: float
    burst: float
    tokens: float
    updated_s: float

    def take(self, now_s: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now_s - self.updated_s) * self.rate_per_s)
        self.updated_s = now_s
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


class RateLimiter:
    """One bucket per tenant, created full on first use; rate and burst may change live."""

    def __init__(self) -> None:
        self._buckets: dict[str, TokenBucket] = {}

    def allow(self, tenant: str, rate_per_s: float, burst: int, now_s: float) -> bool:
        if rate_per_s <= 0:
            return True  # unlimited
        bucket = self._buckets.get(tenant)
        if bucket is None:
            bucket = self._buckets[tenant] = TokenBucket(rate_per_s, burst, burst, now_s)
        bucket.rate_per_s, bucket.burst = rate_per_s, burst
        return bucket.take(now_s)
