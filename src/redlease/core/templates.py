"""Lock names filled from a decorated function's arguments (``"order:{user_id}"``)."""

from __future__ import annotations

import inspect
import string
from collections.abc import Callable
from typing import Any

from redlease.errors import InvalidArgument


class KeyTemplate:
    """A ``str.format`` template whose fields must name parameters of the function."""

    def __init__(self, template: str, function: Callable[..., Any]) -> None:
        if not isinstance(template, str) or not template:
            raise InvalidArgument(f"lock name template must be a non-empty str, got {template!r}")
        self.template = template
        self.signature = inspect.signature(function)
        try:
            parsed = list(string.Formatter().parse(template))
        except ValueError as error:
            raise InvalidArgument(
                f"lock name template {template!r} is not a str.format pattern: {error}"
            ) from None
        fields = {
            field.split(".")[0].split("[")[0] for _, field, _, _ in parsed if field is not None
        }
        unknown = sorted(fields - set(self.signature.parameters))
        if unknown:
            raise InvalidArgument(
                f"lock name template {template!r} names {', '.join(unknown)}, which "
                f"{'is not a parameter' if len(unknown) == 1 else 'are not parameters'} "
                f"of {getattr(function, '__qualname__', function)!r}"
            )

    def render(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return self.template.format_map(bound.arguments)
