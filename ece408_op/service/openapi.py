"""``/openapi.json``: the API's schema as FastAPI builds it from the routes' models (api/models.py),
made true of this service before it is served.

Rules:
- The API only (/api/..., /health, /ready): the class's pages are HTML for people, not in it.
- No 422: FastAPI adds one to every route with a parameter, but no route lets FastAPI validate
  its input (each reads its own and refuses with a 400 of the service's shape), and any
  validation error FastAPI raised would be answered 400 too (app.py).
- A refusal is JSON on every route (``{"error": ...}``), also where the route's own answer is text,
  a tar.gz or server-sent events (FastAPI would give the refusal the route's media type).
- Tokens travel in ``Authorization: Bearer``: one security scheme, on every /api route.
- Built once a process (the routes do not change after make_app); no token needed to read it
  (the schema holds no secret: what a route takes and answers, as docs/service.md says).
"""
from fastapi.openapi.utils import get_openapi

API_PATHS = ("/api/", "/health", "/ready")
REFUSAL = {"$ref": "#/components/schemas/Refusal"}


def schema_of(app):
    schema = get_openapi(title=app.title, version=app.version, description=DESCRIPTION, routes=app.routes)
    schema["paths"] = {path: ops for path, ops in schema.get("paths", {}).items() if path.startswith(API_PATHS)}
    schemas = schema.setdefault("components", {}).setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    schema["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    for path, operations in schema["paths"].items():
        for operation in operations.values():
            responses = operation.get("responses", {})
            responses.pop("422", None)
            for code, response in responses.items():
                if code >= "400":                 # JSON whatever the route's answer is (text, a tar.gz, events)
                    response["content"] = {"application/json": {"schema": REFUSAL}}
            if path.startswith("/api/"):
                operation["security"] = [{"bearer": []}]
    return schema


def serve_schema(app):
    """``app.openapi`` (what FastAPI serves at ``openapi_url``): the schema, built on first use."""
    built = {}

    def openapi():
        if "schema" not in built:
            built["schema"] = schema_of(app)
        return built["schema"]
    app.openapi = openapi


DESCRIPTION = ("The class's submission service: a team queues an upload and follows its run; the instructor "
               "manages teams, deadlines and settings; workers claim jobs under a lease. Every refusal is "
               '`{"error": "one line"}`.')
