"""The OpenAPI document served at ``/openapi.json``.

Hand-maintained rather than generated: the routes validate by hand, so there are no
models to generate it from, and a test checks that every route appears here.
"""

from __future__ import annotations

from typing import Any


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json(_ref("Error"), description)


_SESSION_ID = {
    "name": "session_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string"},
    "description": "Session id; URL-encode it (an id that is not a valid session id gets 404).",
}
_CLIENT_ID = {
    "name": "X-Qwenmem-Client-Id",
    "in": "header",
    "required": False,
    "schema": {"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,128}$"},
    "description": "Identifies the caller in the daemon's log; any request may carry it.",
}
_PROJECT = {
    "name": "X-Qwenmem-Project",
    "in": "header",
    "required": False,
    "schema": {"type": "string"},
    "description": "Absolute path of the project whose memory is recalled (its git root "
    "counts); default: the daemon's project.",
}
_COMMON_ERRORS = {
    "400": _error("invalid_client_id"),
    "401": _error("unauthorized (token configured, bearer missing or wrong)"),
    "403": _error("host_not_allowed (DNS rebinding) or origin_not_allowed"),
    "500": _error("internal"),
}


def _proxied(answer: str) -> dict[str, Any]:
    """The answers of a route of the OpenAI-compatible proxy: `answer` with the memory
    header, or an error in OpenAI's shape."""
    return {
        "200": {
            "description": f"{answer}; the header X-Qwenmem-Memories lists the ids of the "
            "memories added (comma-separated)",
            "headers": {"X-Qwenmem-Memories": {"schema": {"type": "string"}}},
            "content": {
                "application/json": {"schema": {"type": "object"}},
                "text/event-stream": {"schema": {"type": "string"}},
            },
        },
        "400": _json(_ref("OpenAIError"), "invalid_request_error: the client's mistake"),
        "401": _json(_ref("OpenAIError"), "authentication_error: the daemon's token"),
        "4XX": _json(_ref("OpenAIError"), "the upstream's own error, status kept"),
        "502": _json(_ref("OpenAIError"), "upstream_unavailable"),
        "504": _json(_ref("OpenAIError"), "upstream_timeout"),
        "5XX": _json(_ref("OpenAIError"), "the upstream's own error, status kept"),
    }

OPENAPI_SCHEMA: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "qwenmem daemon",
        "version": "1",
        "description": "Drive qwenmem chat sessions over HTTP. See docs/daemon.md.",
    },
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": {
            "Error": {
                "type": "object",
                "required": ["error", "code"],
                "properties": {
                    "error": {"type": "string"},
                    "code": {"type": "string"},
                    "sessionId": {"type": "string"},
                },
            },
            "OpenAIError": {
                "type": "object",
                "required": ["error"],
                "properties": {
                    "error": {
                        "type": "object",
                        "required": ["message", "type"],
                        "properties": {
                            "message": {"type": "string"},
                            "type": {"type": "string"},
                            "param": {"type": ["string", "null"]},
                            "code": {"type": ["string", "null"]},
                        },
                    }
                },
            },
            "Memories": {
                "type": "object",
                "required": ["memories"],
                "properties": {
                    "memories": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["id", "category", "key", "value", "origin", "age_days"],
                            "properties": {
                                "id": {"type": "integer"},
                                "category": {"type": "string"},
                                "key": {"type": "string"},
                                "value": {"type": "string"},
                                "origin": {"enum": ["user", "tool", "agent"]},
                                "age_days": {"type": "number"},
                                "scope": {"type": "string"},
                                "score": {"type": "number", "description": "search only"},
                            },
                        },
                    }
                },
            },
            "Session": {
                "type": "object",
                "required": ["sessionId", "title", "createdAt", "updatedAt", "messageCount"],
                "properties": {
                    "sessionId": {"type": "string"},
                    "title": {"type": "string"},
                    "createdAt": {"type": "number", "description": "unix seconds"},
                    "updatedAt": {"type": "number", "description": "unix seconds"},
                    "messageCount": {"type": "integer"},
                },
            },
        },
    },
    "security": [{"bearer": []}],
    "paths": {
        "/health": {
            "get": {
                "summary": "Liveness; never needs a token",
                "security": [],
                "responses": {
                    "200": _json(
                        {"type": "object", "properties": {"status": {"const": "ok"}}}, "Alive"
                    )
                },
            }
        },
        "/capabilities": {
            "get": {
                "summary": "Protocol version and feature tags",
                "responses": {
                    "200": _json(
                        {
                            "type": "object",
                            "required": ["v", "features"],
                            "properties": {
                                "v": {"const": 1},
                                "features": {"type": "array", "items": {"type": "string"}},
                            },
                        },
                        "Features include session_recap and memory",
                    ),
                    **_COMMON_ERRORS,
                },
            }
        },
        "/openapi.json": {
            "get": {
                "summary": "This document",
                "responses": {"200": {"description": "OpenAPI 3.1 document"}, **_COMMON_ERRORS},
            }
        },
        "/session": {
            "post": {
                "summary": "Create a session in the daemon's project",
                "parameters": [_CLIENT_ID],
                "requestBody": {
                    "required": False,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "properties": {"title": {"type": "string", "maxLength": 200}},
                            }
                        }
                    },
                },
                "responses": {
                    "201": _json(_ref("Session"), "Created"),
                    "413": _error("body_too_large"),
                    **_COMMON_ERRORS,
                    "400": _error("invalid_json | invalid_request | invalid_client_id"),
                },
            }
        },
        "/sessions": {
            "get": {
                "summary": "Sessions of the daemon's project, newest first",
                "responses": {
                    "200": _json(
                        {
                            "type": "object",
                            "required": ["sessions"],
                            "properties": {"sessions": {"type": "array", "items": _ref("Session")}},
                        },
                        "Sessions",
                    ),
                    **_COMMON_ERRORS,
                },
            }
        },
        "/session/{session_id}/prompt": {
            "post": {
                "summary": "Run one query through the chat loop (tools, memory); SSE with "
                "Accept: text/event-stream (events delta, tool_call, tool_result, done, error)",
                "parameters": [_SESSION_ID, _CLIENT_ID],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["text"],
                                "properties": {"text": {"type": "string", "minLength": 1}},
                            }
                        }
                    },
                },
                "responses": {
                    "200": {
                        "description": "The final reply (JSON) or an event stream",
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["sessionId", "reply"],
                                    "properties": {
                                        "sessionId": {"type": "string"},
                                        "reply": {"type": "string"},
                                        "status": {
                                            "enum": ["ok", "turn_cap", "context_limit", "cancelled"]
                                        },
                                        "memories": {
                                            "description": "The memories the reply's requests carried (its receipt)",
                                            "type": "array",
                                            "items": {
                                                "type": "object",
                                                "required": ["id", "key", "value"],
                                                "properties": {
                                                    "id": {"type": "integer"},
                                                    "key": {"type": "string"},
                                                    "value": {"type": "string"},
                                                },
                                            },
                                        },
                                    },
                                }
                            },
                            "text/event-stream": {"schema": {"type": "string"}},
                        },
                    },
                    **_COMMON_ERRORS,
                    "400": _error("invalid_json | invalid_request | invalid_client_id"),
                    "404": _error("session_not_found"),
                    "409": _error("session_busy: another prompt is running in this session"),
                    "413": _error("body_too_large"),
                    "502": _error("llm_error: the model request failed"),
                },
            }
        },
        "/session/{session_id}/messages": {
            "get": {
                "summary": "The session's stored chat messages, in order (OpenAI dicts plus "
                "createdAt); /clear and compaction hide none",
                "parameters": [_SESSION_ID],
                "responses": {
                    "200": _json(
                        {
                            "type": "object",
                            "required": ["sessionId", "messages"],
                            "properties": {
                                "sessionId": {"type": "string"},
                                "messages": {"type": "array", "items": {"type": "object"}},
                            },
                        },
                        "Messages",
                    ),
                    **_COMMON_ERRORS,
                    "404": _error("session_not_found"),
                },
            }
        },
        "/session/{session_id}": {
            "delete": {
                "summary": "Delete a session of the daemon's project; a JSON copy is kept in "
                "$QWENMEM_HOME/trash for recovery",
                "parameters": [_SESSION_ID, _CLIENT_ID],
                "responses": {
                    "200": _json(
                        {
                            "type": "object",
                            "required": ["sessionId", "deleted"],
                            "properties": {
                                "sessionId": {"type": "string"},
                                "deleted": {"const": True},
                                "copy": {"type": "string", "description": "the kept copy"},
                            },
                        },
                        "Deleted",
                    ),
                    **_COMMON_ERRORS,
                    "404": _error("session_not_found"),
                    "409": _error("session_busy: a prompt is running in this session"),
                },
            }
        },
        "/memory": {
            "get": {
                "summary": "Active memories of the daemon's project and the user's global "
                "ones, newest first",
                "parameters": [
                    {
                        "name": "category",
                        "in": "query",
                        "required": False,
                        "schema": {"enum": ["user", "feedback", "project", "reference"]},
                    }
                ],
                "responses": {
                    "200": _json(_ref("Memories"), "Memories"),
                    **_COMMON_ERRORS,
                    "400": _error("invalid_request (unknown category) | invalid_client_id"),
                    "404": _error("memory_disabled"),
                },
            }
        },
        "/memory/search": {
            "post": {
                "summary": "The chat's recall for a query (filters, both channels, threshold)",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["query"],
                                "properties": {
                                    "query": {"type": "string", "minLength": 1},
                                    "k": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5},
                                },
                            }
                        }
                    },
                },
                "responses": {
                    "200": _json(_ref("Memories"), "Best first, each with its score"),
                    **_COMMON_ERRORS,
                    "400": _error("invalid_json | invalid_request | invalid_client_id"),
                    "404": _error("memory_disabled"),
                },
            }
        },
        "/memory/{memory_id}": {
            "delete": {
                "summary": "Forget one memory (audited)",
                "parameters": [
                    {"name": "memory_id", "in": "path", "required": True, "schema": {"type": "integer"}},
                    _CLIENT_ID,
                ],
                "responses": {
                    "200": _json(
                        {
                            "type": "object",
                            "required": ["id", "forgotten"],
                            "properties": {"id": {"type": "integer"}, "forgotten": {"const": True}},
                        },
                        "Forgotten",
                    ),
                    **_COMMON_ERRORS,
                    "404": _error("memory_not_found (also another user's or project's id) | memory_disabled"),
                },
            }
        },
        "/v1/chat/completions": {
            "post": {
                "summary": "OpenAI-compatible chat completions, forwarded to the configured "
                "[llm] endpoint with the recalled memory of the last user message added "
                "(contract §9); stream: true answers with the upstream's SSE",
                "parameters": [_PROJECT],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["messages"],
                                "properties": {
                                    "model": {"type": "string"},
                                    "messages": {"type": "array", "minItems": 1},
                                    "stream": {"type": "boolean"},
                                    "tools": {"type": "array"},
                                },
                            }
                        }
                    },
                },
                "responses": _proxied("The upstream's completion, unchanged"),
            }
        },
        "/v1/responses": {
            "post": {
                "summary": "The OpenAI Responses API with the recalled memory of the latest user "
                "message added (contract §16): forwarded when the [llm] endpoint serves it, else "
                "translated onto its chat completions (text, function calls, usage; "
                "previous_response_id kept by the proxy); stream: true answers with SSE events",
                "parameters": [_PROJECT],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["input"],
                                "properties": {
                                    "model": {"type": "string"},
                                    "input": {"type": ["string", "array"]},
                                    "instructions": {"type": "string"},
                                    "previous_response_id": {"type": "string"},
                                    "stream": {"type": "boolean"},
                                    "tools": {"type": "array"},
                                },
                            }
                        }
                    },
                },
                "responses": {
                    **_proxied("A response object (or its stream of events)"),
                    "400": _json(
                        _ref("OpenAIError"),
                        "invalid_request_error: the client's mistake, or what the translation cannot carry",
                    ),
                    "404": _json(_ref("OpenAIError"), "previous_response_not_found"),
                },
            }
        },
        "/v1/models": {
            "get": {
                "summary": "The upstream's models (the configured model when it lists none)",
                "responses": {
                    "200": _json({"type": "object"}, "OpenAI's model list"),
                    "401": _json(_ref("OpenAIError"), "authentication_error: the daemon's token"),
                    "502": _json(_ref("OpenAIError"), "upstream_unavailable"),
                },
            }
        },
        "/session/{session_id}/recap": {
            "post": {
                "summary": "A 1-2 sentence 'where was I' recap; body ignored; 60 s backstop",
                "parameters": [_SESSION_ID, _CLIENT_ID],
                "responses": {
                    "200": _json(
                        {
                            "type": "object",
                            "required": ["sessionId", "recap"],
                            "properties": {
                                "sessionId": {"type": "string"},
                                "recap": {"type": ["string", "null"]},
                            },
                        },
                        "recap is null when there is nothing to say",
                    ),
                    **_COMMON_ERRORS,
                    "404": _error("session_not_found"),
                },
            }
        },
    },
}
