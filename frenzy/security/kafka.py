"""aiokafka client options for a broker with TLS and/or SASL (from BusSettings)."""
from __future__ import annotations

from frenzy.config import BusSettings


def kafka_client_options(settings: BusSettings) -> dict:
    """Extra keyword arguments for AIOKafkaProducer, AIOKafkaConsumer and the admin client."""
    protocol = settings.kafka_security_protocol.upper()
    if protocol == "PLAINTEXT":
        return {}
    options: dict = {"security_protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        from aiokafka.helpers import create_ssl_context

        options["ssl_context"] = create_ssl_context(
            cafile=settings.kafka_ssl_cafile or None, certfile=settings.kafka_ssl_certfile or None,
            keyfile=settings.kafka_ssl_keyfile or None)
    if protocol.startswith("SASL"):
        options.update(sasl_mechanism=settings.kafka_sasl_mechanism or "PLAIN",
                       sasl_plain_username=settings.kafka_sasl_username,
                       sasl_plain_password=settings.kafka_sasl_password)
    return options
