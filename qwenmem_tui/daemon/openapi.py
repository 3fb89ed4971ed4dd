"""The daemon's routes as declarations, and the OpenAPI document generated from them.

A route is declared once, with what it answers (`ApiRoute`: path, method, handler and
its OpenAPI operation): the daemon's own in `server.py`, each feature's in its
`routes.py` (`Feature.routes`). The server mounts them and serves the document built
from the same list (`document`), so no route can be served undocumented or documented
without being served. The handlers validate by hand (the §7 envelope is ours), so the
request and response schemas are written beside each handler rather than derived from
models.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

Schema = dict[str, Any]
"""A JSON Schema (OpenAPI 3.1 dialect) or an OpenAPI object, as JSON."""
Endpoint = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True)
class ApiRoute:
    """One route and its OpenAPI operation; what a `Feature.routes` sequence holds."""

    path: str
    """Starlette's path, converters included (``/session/{session_id:path}/prompt``)."""
    method: str
    endpoint: Endpoint
    operation: Schema
    """The OpenAPI operation object: summary, parameters, requestBody, responses."""
    schemas: Mapping[str, Schema] = field(default_factory=dict)
    """The `components/schemas` its operation refers to (`ref`), by name."""
    capabilities: tuple[str, ...] = ()
    """The tags `/capabilities` lists for it (a client asks before it relies on it)."""

    @property
    def document_path(self) -> str:
        """The path as OpenAPI writes it: converters left out."""
        return _CONVERTER.sub("}", self.path)

    def route(self) -> Route:
        return Route(self.path, self.endpoint, methods=[self.method])


_CONVERTER = re.compile(r":[a-z]+}")


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def json_response(schema: Schema, description: str) -> Schema:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def json_body(schema: Schema, *, required: bool = True) -> Schema:
    """A JSON request body."""
    return {"required": required, "content": {"application/json": {"schema": schema}}}


def error(description: str) -> Schema:
    """An answer in the §7 error envelope; the description names its codes."""
    return json_response(ref("Error"), description)


SESSION_ID: Schema = {
    "name": "session_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string"},
    "description": "Session id; URL-encode it (an id that is not a valid session id gets 404).",
}
CLIENT_ID: Schema = {
    "name": "X-Qwenmem-Client-Id",
    "in": "header",
    "required": False,
    "schema": {"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,128}$"},
    "description": "Identifies the caller in the daemon's log; any request may carry it.",
}
COMMON_ERRORS: Schema = {
    "400": error("invalid_client_id"),
    "401": error("unauthorized (token configured, bearer missing or wrong)"),
    "403": error("host_not_allowed (DNS rebinding) or origin_not_allowed"),
    "500": error("internal"),
}
"""What the guard in front of every route may answer instead of the route."""

ERROR_SCHEMA: Schema = {
    "type": "object",
    "required": ["error", "code"],
    "properties": {
        "error": {"type": "string"},
        "code": {"type": "string"},
        "sessionId": {"type": "string"},
    },
}


def document(routes: Iterable[ApiRoute]) -> Schema:
    """The OpenAPI 3.1 document of `routes`, in their order; a component two routes
    declare differently is a mistake in the code (ValueError), not a choice to make."""
    schemas: dict[str, Schema] = {"Error": ERROR_SCHEMA}
    paths: dict[str, dict[str, Schema]] = {}
    for route in routes:
        for name, schema in route.schemas.items():
            if schemas.setdefault(name, schema) != schema:
                raise ValueError(f"two routes declare the component {name!r} differently")
        operations = paths.setdefault(route.document_path, {})
        method = route.method.lower()
        if method in operations:
            raise ValueError(f"{route.method} {route.document_path} is declared twice")
        operations[method] = route.operation
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "qwenmem daemon",
            "version": "1",
            "description": "Drive qwenmem chat sessions over HTTP. See docs/daemon.md.",
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": schemas,
        },
        "security": [{"bearer": []}],
        "paths": paths,
    }
