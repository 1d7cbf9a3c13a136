"""Throwaway certificates for the authentication tests: a CA, a broker certificate for
127.0.0.1 and a client certificate (subject O=rustka, CN=carol), all signed by the CA,
generated with ``cryptography`` so TLS and mutual TLS run for real on both sides."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _key_pem(key: Any) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _issue(
    subject: x509.Name, issuer: x509.Name, key: Any, signer: Any, ca: bool
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    return builder.sign(signer, hashes.SHA256())


def make_pki(directory: Path) -> dict[str, Path]:
    """ca.pem; server.pem/server.key; client.pem/client.key (subject O=rustka, CN=carol)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rustka test CA")])
    ca = _issue(ca_name, ca_name, ca_key, ca_key, ca=True)
    out = {"ca": directory / "ca.pem"}
    out["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for who, name in (
        ("server", [x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]),
        (
            "client",
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "rustka"),
                x509.NameAttribute(NameOID.COMMON_NAME, "carol"),
            ],
        ),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _issue(x509.Name(name), ca_name, key, ca_key, ca=False)
        out[f"{who}_key"] = directory / f"{who}.key"
        out[f"{who}_key"].write_bytes(_key_pem(key))
        out[f"{who}_key"].chmod(0o600)
        out[f"{who}_cert"] = directory / f"{who}.pem"
        out[f"{who}_cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return out
