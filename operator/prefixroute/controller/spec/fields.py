"""Typed reads from a spec mapping, with the field's path in every error message."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prefixroute.controller.errors import SpecError

Obj = Mapping[str, Any]


class Fields:
    """One object of the spec, e.g. ``spec.engine``; getters return the default when absent."""

    def __init__(self, data: Any, path: str) -> None:
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise SpecError(f"{path} must be an object")
        self.data: Obj = data
        self.path = path

    def _get(self, key: str) -> Any:
        return self.data.get(key)

    def where(self, key: str) -> str:
        return f"{self.path}.{key}"

    def child(self, key: str) -> Fields:
        return Fields(self._get(key), self.where(key))

    def text_or_none(self, key: str) -> str | None:
        value = self._get(key)
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            raise SpecError(f"{self.where(key)} must be a string")
        return value

    def text(self, key: str, default: str) -> str:
        value = self.text_or_none(key)
        return default if value is None else value

    def integer(self, key: str, default: int) -> int:
        value = self._get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{self.where(key)} must be an integer")
        return value

    def integer_or_none(self, key: str) -> int | None:
        return None if self._get(key) is None else self.integer(key, 0)

    def number(self, key: str, default: float) -> float:
        value = self._get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpecError(f"{self.where(key)} must be a number")
        return float(value)

    def flag(self, key: str, default: bool) -> bool:
        value = self._get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise SpecError(f"{self.where(key)} must be true or false")
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        value = self._get(key)
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise SpecError(f"{self.where(key)} must be a list of strings")
        return tuple(value)

    def objects(self, key: str) -> tuple[Obj, ...]:
        value = self._get(key)
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
            raise SpecError(f"{self.where(key)} must be a list of objects")
        return tuple(value)

    def object(self, key: str) -> Obj:
        value = self._get(key)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise SpecError(f"{self.where(key)} must be an object")
        return value

    def string_map(self, key: str) -> dict[str, str]:
        value = self.object(key)
        if not all(isinstance(v, str) for v in value.values()):
            raise SpecError(f"{self.where(key)} must map names to strings")
        return dict(value)

    def quantity_or_none(self, key: str) -> str | int | None:
        value = self._get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise SpecError(f"{self.where(key)} must be a quantity such as 16Gi")
        return value
