"""Who may do what: tokens, tenants, TLS, signed records and input limits (docs/security.md).

Pure mechanisms with no service knowledge; each service wires them in with a small hook.
"""
