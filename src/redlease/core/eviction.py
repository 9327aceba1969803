"""What a server's eviction policy means for the locks it keeps."""

from __future__ import annotations

from typing import Any


def eviction_warning(config: dict[str, Any]) -> str | None:
    """The warning for a server whose ``CONFIG GET maxmemory*`` says it may evict keys: a
    lock evicted under memory pressure is simply gone, and another client takes it."""
    policy = str(config.get("maxmemory-policy", "noeviction"))
    if str(config.get("maxmemory", "0")) == "0" or policy == "noeviction":
        return None
    counter = policy.startswith("allkeys")  # the counter has no expiry to go by
    return (
        f"the server evicts keys under memory pressure (maxmemory-policy {policy}): a lock "
        "can vanish while held"
        + (", and a fencing counter too (tokens start again from 1)" if counter else "")
        + "; use noeviction on servers that keep locks"
    )
