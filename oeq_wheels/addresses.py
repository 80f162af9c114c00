"""The addresses we may ship or tell users: the owner's GitHub account (from `[package] repository`) and the
upstream projects and registries pins.toml names in [addresses]. An extra index is a trust decision (pip
installs binaries from it), so any other host or account in METADATA, README, the docs or the site is an error."""
from __future__ import annotations

import re

# A URL as it stands in Markdown, HTML, METADATA or a shell line: up to the first space, quote, bracket or
# backquote. A placeholder such as https://<owner>.github.io/ stops at "<" and names no host.
URL_RE = re.compile(r"https?://[^\s\"'`<>()\[\]{}|\\]*")


def owner_prefixes(repository: str) -> tuple[str, ...]:
    """Where the owner's account is: its GitHub repositories and its Pages sites (GitHub lowercases the owner)."""
    owner = repository.split("/")[0]
    return f"https://github.com/{owner}/", f"https://{owner.lower()}.github.io/"


def is_allowed(url: str, prefixes: tuple[str, ...]) -> bool:
    """GitHub names are case-blind, so the comparison is too; a bare host is its prefix without the path."""
    low = url.lower().rstrip(".,;:")
    return any(low.startswith(p.lower()) or low + "/" == p.lower() for p in prefixes)


def foreign(text: str, prefixes: tuple[str, ...]) -> list[str]:
    """Every URL of `text` outside `prefixes`, once each, in order (URLs naming no host are placeholders)."""
    out = []
    for url in URL_RE.findall(text):
        host = url.split("://", 1)[1].split("/", 1)[0]
        if host and not is_allowed(url, prefixes) and url not in out:
            out.append(url)
    return out
