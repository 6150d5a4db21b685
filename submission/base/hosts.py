"""Which hosts are this machine's own: the only ones Podium speaks plain http to where a secret or a credential may
travel (a registry on this host, a local stand-in for a server)."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit


def loopback(host: str) -> bool:
    """Whether `host` (a name or an address, IPv6 without brackets) is this host's loopback: localhost, 127.0.0.0/8,
    ::1."""
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def private_url(url: str) -> bool:
    """Whether what is sent to `url` stays between the two ends: https, or http to this host's loopback."""
    parts = urlsplit(url)
    return bool(parts.hostname) and (parts.scheme == "https" or (parts.scheme == "http" and loopback(parts.hostname)))
