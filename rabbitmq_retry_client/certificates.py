"""What an X.509 certificate says about itself, for an error line: its subject and its validity dates.

The standard library reads a certificate only after verifying it (`getpeercert`), which is exactly what fails when
a certificate has expired or is not valid yet; so this reads the DER structure itself (RFC 5280 §4.1: the
TBSCertificate's optional version, serial number, signature algorithm, issuer, validity and subject, in that
order). Nothing here verifies anything: it names what a handshake refused.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from datetime import UTC, datetime

NAMES = {"2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O", "2.5.4.11": "OU",
         "1.2.840.113549.1.9.1": "emailAddress"}
"""Attribute OID → the short name openssl prints."""


@dataclass(frozen=True)
class Certificate:
    subject: str
    """`CN=broker,O=Example`, openssl's short names, most significant last as in RFC 4514."""
    not_before: datetime
    not_after: datetime

    def validity(self) -> str:
        """`valid from 2020-01-01 00:00 UTC to 2021-01-01 00:00 UTC`."""
        return f"valid from {stamp(self.not_before)} to {stamp(self.not_after)}"


def stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _element(data: bytes, at: int) -> tuple[int, int, int]:
    """(tag, start of content, end of content) of the DER element at `at`."""
    tag, length = data[at], data[at + 1]
    at += 2
    if length & 0x80:
        count = length & 0x7F
        length = int.from_bytes(data[at:at + count], "big")
        at += count
    return tag, at, at + length


def _children(data: bytes, start: int, end: int) -> list[tuple[int, int, int]]:
    found = []
    while start < end:
        tag, content, stop = _element(data, start)
        found.append((tag, content, stop))
        start = stop
    return found


def _oid(raw: bytes) -> str:
    parts = [raw[0] // 40, raw[0] % 40]
    value = 0
    for byte in raw[1:]:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            parts.append(value)
            value = 0
    return ".".join(map(str, parts))


def _name(data: bytes, start: int, end: int) -> str:
    """An X.501 Name as `CN=…,O=…` (RFC 4514 order: the last RDN first)."""
    parts = []
    for _, set_start, set_end in _children(data, start, end):
        for _, seq_start, seq_end in _children(data, set_start, set_end):
            (_, oid_start, oid_end), (tag, value_start, value_end) = _children(data, seq_start, seq_end)[:2]
            oid = _oid(data[oid_start:oid_end])
            raw = data[value_start:value_end]
            value = raw.decode("utf-16-be" if tag == 0x1E else "utf-8", errors="replace")
            parts.append(f"{NAMES.get(oid, oid)}={value}")
    return ",".join(reversed(parts))


def _time(data: bytes, tag: int, start: int, end: int) -> datetime:
    text = data[start:end].decode("ascii").rstrip("Z")
    if tag == 0x17:  # UTCTime, YYMMDDHHMMSS: 50-99 are 19xx
        text = ("19" if int(text[:2]) >= 50 else "20") + text
    return datetime.strptime(text[:14], "%Y%m%d%H%M%S").replace(tzinfo=UTC)


def from_der(der: bytes) -> Certificate:
    """The certificate's subject and dates; ValueError when `der` is not a certificate."""
    try:
        _, cert_start, cert_end = _element(der, 0)
        _, tbs_start, tbs_end = _children(der, cert_start, cert_end)[0]
        fields = _children(der, tbs_start, tbs_end)
        if fields[0][0] == 0xA0:  # [0] version
            fields = fields[1:]
        validity, subject = fields[3], fields[4]
        (nb_tag, nb_start, nb_end), (na_tag, na_start, na_end) = _children(der, validity[1], validity[2])
        return Certificate(_name(der, subject[1], subject[2]), _time(der, nb_tag, nb_start, nb_end),
                           _time(der, na_tag, na_start, na_end))
    except (IndexError, ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"not a DER certificate: {error}") from None


PEM = re.compile(rb"-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----", re.DOTALL)


def from_pem_file(path: str) -> Certificate | None:
    """The first certificate of a PEM file; None when it holds none or cannot be read."""
    try:
        with open(path, "rb") as file:
            found = PEM.search(file.read())
        return from_der(base64.b64decode(b"".join(found[1].split()))) if found else None
    except (OSError, ValueError):
        return None
