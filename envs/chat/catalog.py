"""Personas and requests: the YAML files under ``data/``, loaded, validated and cached.

``data/personas/<name>.yaml`` describes one simulated user::

    name: student                # optional; defaults to the file name, no "/" allowed
    description: A university student who reads answers on their phone between classes.
    preferences:                 # hidden from the agent; checked in this order
      - kind: max_sentences      # a key of envs.chat.preferences.PREFERENCE_KINDS
        params: {n: 3}
      - kind: call_me
        params: {name: Sam}
        corrections: ["It's Sam, remember?"]   # optional; replaces the default phrasings
    praise: ["Perfect, thanks."] # optional; what the user says when every preference is met
    request_tags: [study]        # optional; only requests with one of these tags

Add a persona by dropping such a file into ``data/personas/`` or into a folder passed as
``personas_dir=`` (its personas are added to the shipped ones, and override a shipped
persona of the same name). ``data/requests.yaml`` holds the request pool; see its header.

Every problem is reported as :class:`CatalogError` naming the file and the field, e.g.
``personas/student.yaml: preferences[1].kind 'foo' is unknown; known: ...``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from envs.chat.preferences import Preference, PreferenceSpecError, build_preference

DATA_DIR = Path(__file__).parent / "data"
PERSONAS_DIR = DATA_DIR / "personas"
REQUESTS_FILE = DATA_DIR / "requests.yaml"
SPLITS = ("train", "heldout")

_PERSONA_KEYS = {"name", "description", "preferences", "praise", "request_tags"}
_PREFERENCE_KEYS = {"kind", "params", "corrections"}
_REQUEST_KEYS = {"id", "split", "text", "topic", "keywords", "tags"}


class CatalogError(ValueError):
    """A persona or request file that cannot be used; the message names file and field."""


@dataclass(frozen=True)
class Persona:
    """A simulated user: who they are, and what they want from a reply (hidden)."""

    name: str
    description: str
    preferences: tuple[Preference, ...]
    praise: tuple[str, ...] = ()
    request_tags: tuple[str, ...] = ()
    """Empty: every request. Otherwise only requests carrying one of these tags."""

    def wants(self, request: Request) -> bool:
        return not self.request_tags or bool(set(self.request_tags) & set(request.tags))


@dataclass(frozen=True)
class Request:
    """Something the user asks; ``keywords`` decide whether a reply is on topic."""

    id: str
    split: str
    text: str
    topic: str
    keywords: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(DATA_DIR))
    except ValueError:
        return str(path)


def _read_mapping(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise CatalogError(f"{_shown(path)}: is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise CatalogError(f"{_shown(path)}: must hold a mapping at the top level, "
                           f"got {type(data).__name__}")
    return data


def _strings(value: object, where: str, *, allow_empty: bool = True) -> tuple[str, ...]:
    if value is None:
        value = []
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise CatalogError(f"{where} must be a list of non-empty strings, got {value!r:.80}")
    if not allow_empty and not value:
        raise CatalogError(f"{where} must not be empty")
    return tuple(v.strip() for v in value)


def _unknown_keys(data: dict[str, Any], allowed: set[str], where: str) -> None:
    extra = sorted(set(data) - allowed)
    if extra:
        raise CatalogError(f"{where}{extra[0]} is not a known field; "
                           f"known: {', '.join(sorted(allowed))}")


def parse_persona(path: Path) -> Persona:
    """One persona file -> :class:`Persona`, or :class:`CatalogError` naming the field."""
    shown = _shown(path)
    data = _read_mapping(path)
    _unknown_keys(data, _PERSONA_KEYS, f"{shown}: ")
    name = data.get("name", path.stem)
    if not isinstance(name, str) or not name.strip() or "/" in name or name == "all":
        raise CatalogError(f"{shown}: name must be a non-empty string without '/' and not "
                           f"'all', got {name!r}")
    description = data.get("description")
    if not isinstance(description, str) or not description.strip():
        raise CatalogError(f"{shown}: description must be a non-empty string "
                           "(the LLM-played user reads it)")
    specs = data.get("preferences")
    if not isinstance(specs, list) or not specs:
        raise CatalogError(f"{shown}: preferences must be a non-empty list of {{kind, params}}")
    preferences: list[Preference] = []
    for i, spec in enumerate(specs):
        where = f"{shown}: preferences[{i}]"
        if not isinstance(spec, dict):
            raise CatalogError(f"{where} must be a mapping with kind and params, got {spec!r:.60}")
        _unknown_keys(spec, _PREFERENCE_KEYS, f"{where}.")
        try:
            pref = build_preference(spec.get("kind"), spec.get("params"), spec.get("corrections"))
        except PreferenceSpecError as exc:
            raise CatalogError(f"{where}.{exc}") from None
        if any(p.kind == pref.kind for p in preferences):
            raise CatalogError(f"{where}.kind {pref.kind!r} appears twice; merge the two entries")
        preferences.append(pref)
    return Persona(name=name.strip(), description=" ".join(description.split()),
                   preferences=tuple(preferences),
                   praise=_strings(data.get("praise"), f"{shown}: praise"),
                   request_tags=_strings(data.get("request_tags"), f"{shown}: request_tags"))


@functools.lru_cache(maxsize=16)
def _load_personas(extra_dir: str | None) -> dict[str, Persona]:
    personas: dict[str, Persona] = {}
    for folder in (PERSONAS_DIR, *([Path(extra_dir)] if extra_dir else [])):
        if not folder.is_dir():
            raise CatalogError(f"personas_dir {str(folder)!r} is not a folder; pass a folder "
                               "of <name>.yaml persona files")
        seen: dict[str, Path] = {}
        for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
            persona = parse_persona(path)
            if persona.name in seen:
                raise CatalogError(f"{_shown(path)}: name {persona.name!r} is already used by "
                                   f"{_shown(seen[persona.name])}")
            seen[persona.name] = path
            personas[persona.name] = persona
    return personas


def load_personas(personas_dir: str | Path | None = None) -> dict[str, Persona]:
    """The shipped personas, plus (and overridden by) those in ``personas_dir``. Cached."""
    extra = str(Path(personas_dir).expanduser().resolve()) if personas_dir is not None else None
    return dict(_load_personas(extra))


@functools.lru_cache(maxsize=4)
def _load_requests(path: str) -> tuple[Request, ...]:
    file = Path(path)
    data = _read_mapping(file)
    shown = _shown(file)
    _unknown_keys(data, {"requests"}, f"{shown}: ")
    items = data.get("requests")
    if not isinstance(items, list) or not items:
        raise CatalogError(f"{shown}: requests must be a non-empty list")
    requests: list[Request] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        where = f"{shown}: requests[{i}]"
        if not isinstance(item, dict):
            raise CatalogError(f"{where} must be a mapping, got {item!r:.60}")
        _unknown_keys(item, _REQUEST_KEYS, f"{where}.")
        rid, split, text = item.get("id"), item.get("split"), item.get("text")
        if not isinstance(rid, str) or not rid.strip() or "/" in rid:
            raise CatalogError(f"{where}.id must be a non-empty string without '/', got {rid!r}")
        if rid in seen:
            raise CatalogError(f"{where}.id {rid!r} is used twice")
        seen.add(rid)
        if split not in SPLITS:
            raise CatalogError(f"{where}.split {split!r} must be one of {list(SPLITS)}")
        if not isinstance(text, str) or not text.strip():
            raise CatalogError(f"{where}.text must be a non-empty string")
        topic = item.get("topic", "what I asked")
        if not isinstance(topic, str) or not topic.strip():
            raise CatalogError(f"{where}.topic must be a non-empty string")
        requests.append(Request(id=rid, split=split, text=text.strip(), topic=topic.strip(),
                                keywords=_strings(item.get("keywords"), f"{where}.keywords"),
                                tags=_strings(item.get("tags"), f"{where}.tags")))
    return tuple(requests)


def load_requests(path: str | Path | None = None) -> tuple[Request, ...]:
    """The request pool (``data/requests.yaml`` unless ``path``), validated. Cached."""
    return _load_requests(str(Path(path).resolve()) if path is not None else str(REQUESTS_FILE))
